//! The load-balancer reconcile core against an in-process kos-sim: each test drives passes the way
//! the Kubernetes wiring will (apply the outcome's annotations and status, requeue after the given
//! delay, until converged) and checks the cloud through the simulator's state and request log.
//! Deadlines are generous; nothing asserts on timing.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service, ServiceSpec, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::CloudConfig;
use kos_ccm::lb::annotations as a;
use kos_ccm::lb::{LbSettings, LoadBalancers, Outcome, reasons};
use kos_cloud::model::load_balancer::{
    HealthMonitor, LbAlgorithm, Listener, ListenerCreate, ListenerUpdate, LoadBalancer,
    LoadBalancerCreate, LoadBalancerFilter, Member, MemberSpec, MonitorType, Pool, PoolCreate,
    PoolParent, PoolUpdate, Protocol, Vip,
};
use kos_cloud::model::network::{
    FixedIpRequest, FloatingIp, FloatingIpCreate, FloatingIpFilter, Port, PortCreate, PortUpdate,
    SecurityGroup, SecurityGroupCreate, SecurityGroupFilter,
};
use kos_cloud::{RetryPolicy, Session};
use kos_sim::{FaultRule, LogEntry, Sim, SimConfig};
use support::{node, ports_of};
use tokio::time::Instant;

const AUTH: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nregion = r1\nusername = u\npassword = p\ntenant-name = t\n";

struct Cloud {
    sim: Sim,
    session: Session,
    subnet: String,
    public: String,
    _dir: tempfile::TempDir,
}

async fn cloud() -> Cloud {
    cloud_with(SimConfig::fast(), RetryPolicy::fast()).await
}

async fn cloud_with(cfg: SimConfig, policy: RetryPolicy) -> Cloud {
    let sim = Sim::start(cfg).await.expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = support::connect(&sim, dir.path(), policy)
        .await
        .expect("connect");
    let net = session.network();
    let public = net.external_network(None).await.expect("public").id;
    let (_, subnet, _) = support::node_network(&session, "10.10.0.0/24", Some(&public)).await;
    Cloud {
        sim,
        session,
        subnet,
        public,
        _dir: dir,
    }
}

impl Cloud {
    fn config(&self, extra: &str) -> Arc<CloudConfig> {
        let text = format!(
            "{AUTH}[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {}\n{extra}",
            self.subnet, self.public
        );
        Arc::new(
            CloudConfig::parse("cloud.conf", &text)
                .expect("cloud.conf")
                .config,
        )
    }

    fn controller(&self, cluster: &str, extra: &str) -> LoadBalancers {
        self.controller_with(self.session.clone(), settings(cluster), extra)
    }

    fn controller_with(&self, session: Session, s: LbSettings, extra: &str) -> LoadBalancers {
        LoadBalancers::new(session, self.config(extra), s)
    }

    fn seq(&self) -> u64 {
        support::sim_seq(&self.sim)
    }

    fn log_since(&self, seq: u64) -> Vec<LogEntry> {
        support::sim_log_since(&self.sim, seq)
    }

    async fn lbs(&self) -> Vec<LoadBalancer> {
        self.session
            .load_balancer()
            .list_load_balancers(&LoadBalancerFilter::default())
            .await
            .expect("list LBs")
    }

    async fn lb(&self, id: &str) -> Option<LoadBalancer> {
        self.session
            .load_balancer()
            .get_load_balancer(id)
            .await
            .expect("get LB")
    }

    async fn listeners(&self, lb: &str) -> Vec<Listener> {
        let mut l = self
            .session
            .load_balancer()
            .list_listeners(lb)
            .await
            .expect("listeners");
        l.sort_by_key(|l| l.protocol_port);
        l
    }

    async fn pool(&self, id: &str) -> Pool {
        self.session
            .load_balancer()
            .get_pool(id)
            .await
            .expect("pool")
            .expect("pool exists")
    }

    async fn members(&self, pool: &str) -> Vec<Member> {
        let mut m = self
            .session
            .load_balancer()
            .list_members(pool)
            .await
            .expect("members");
        m.sort_by(|a, b| a.name.cmp(&b.name));
        m
    }

    async fn monitor(&self, pool: &Pool) -> Option<HealthMonitor> {
        let id = pool.healthmonitor_id.as_deref()?;
        self.session
            .load_balancer()
            .get_health_monitor(id)
            .await
            .expect("monitor")
    }

    async fn fips(&self) -> Vec<FloatingIp> {
        self.session
            .network()
            .list_floating_ips(&FloatingIpFilter::default())
            .await
            .expect("fips")
    }

    async fn wait_active(&self, id: &str) {
        self.session
            .load_balancer()
            .wait_for_active(id, Instant::now() + Duration::from_secs(30))
            .await
            .expect("active");
    }
}

fn settings(cluster: &str) -> LbSettings {
    LbSettings {
        pending_requeue: Duration::from_millis(10),
        retry_requeue: Duration::from_millis(50),
        snapshot_max_age: Duration::from_secs(2),
        ..LbSettings::new(cluster)
    }
}

static UID: AtomicU32 = AtomicU32::new(1);

fn service(name: &str, ports: &[(&str, i32, i32)]) -> Service {
    let uid = UID.fetch_add(1, Ordering::SeqCst);
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("00000000-0000-4000-8000-{uid:012}")),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(ports_of(ports)),
            ..Default::default()
        }),
        status: Some(ServiceStatus::default()),
    }
}

fn annotate(svc: &mut Service, key: &str, value: &str) {
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
}

fn spec(svc: &mut Service) -> &mut ServiceSpec {
    svc.spec.get_or_insert_with(ServiceSpec::default)
}

fn nodes(n: usize) -> Vec<Node> {
    (1..=n)
        .map(|i| node(&format!("node-{i}"), &format!("10.10.0.{}", 10 + i)))
        .collect()
}

/// What the wiring does with an outcome: annotations and status onto the Service.
fn apply(svc: &mut Service, o: &Outcome) {
    let ann = svc.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in &o.annotations {
        ann.insert(k.clone(), v.clone());
    }
    if let Some(s) = &o.status {
        svc.status
            .get_or_insert_with(ServiceStatus::default)
            .load_balancer = Some(s.clone());
    }
}

/// `LB_TRACE=1` prints every pass (writes and events) while debugging a test.
fn trace(what: &str, svc: &Service, o: &Outcome) {
    if std::env::var_os("LB_TRACE").is_some() {
        eprintln!(
            "{what} {:?}: converged={} requeue={:?} writes={:?} events={:?}",
            svc.metadata.name,
            o.converged,
            o.requeue_after,
            o.writes,
            o.events
                .iter()
                .map(|e| format!("{}: {}", e.reason, e.note))
                .collect::<Vec<_>>()
        );
    }
}

/// Passes until converged; every pass is returned.
async fn converge(lbs: &LoadBalancers, svc: &mut Service, nodes: &[Node]) -> Vec<Outcome> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut passes = Vec::new();
    loop {
        let o = lbs.ensure_service(svc, nodes).await.expect("ensure");
        trace("ensure", svc, &o);
        apply(svc, &o);
        let done = o.converged;
        let after = o.requeue_after;
        passes.push(o);
        if done {
            return passes;
        }
        let after = after.unwrap_or_else(|| panic!("stuck: {:#?}", passes.last()));
        assert!(
            Instant::now() < deadline,
            "not converged: {:#?}",
            passes.last()
        );
        tokio::time::sleep(after).await;
    }
}

async fn delete(lbs: &LoadBalancers, svc: &Service) -> Vec<Outcome> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut passes = Vec::new();
    loop {
        let o = lbs.ensure_service_deleted(svc).await.expect("delete");
        trace("delete", svc, &o);
        let done = o.converged;
        let after = o.requeue_after;
        passes.push(o);
        if done {
            return passes;
        }
        let after = after.unwrap_or_else(|| panic!("stuck: {:#?}", passes.last()));
        assert!(
            Instant::now() < deadline,
            "not deleted: {:#?}",
            passes.last()
        );
        tokio::time::sleep(after).await;
    }
}

fn lb_id(svc: &Service) -> String {
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(a::LOAD_BALANCER_ID))
        .cloned()
        .expect("load-balancer-id annotation")
}

fn address(svc: &Service) -> String {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .and_then(|i| i.first())
        .and_then(|i| i.ip.clone())
        .expect("status ip")
}

fn is_write(e: &LogEntry) -> bool {
    e.method != "GET" && !e.path.starts_with("/identity") && !e.path.starts_with("/_sim")
}

fn writes(log: &[LogEntry]) -> Vec<String> {
    log.iter()
        .filter(|e| is_write(e))
        .map(|e| format!("{} {}", e.operation, e.status))
        .collect()
}

fn count(log: &[LogEntry], method: &str, path_end: &str) -> usize {
    log.iter()
        .filter(|e| e.method == method && e.operation.ends_with(path_end))
        .count()
}

fn conflicts(log: &[LogEntry]) -> usize {
    log.iter().filter(|e| e.status == 409).count()
}

fn all_events(passes: &[Outcome]) -> Vec<(&'static str, String)> {
    passes
        .iter()
        .flat_map(|o| o.events.iter().map(|e| (e.reason, e.note.clone())))
        .collect()
}

#[tokio::test]
async fn a_new_service_gets_one_fully_populated_create_and_a_floating_ip() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080), ("TCP", 443, 30443)]);
    let start = c.seq();
    let passes = converge(&lbs, &mut svc, &nodes(2)).await;
    let log = c.log_since(start);

    // One POST carries listeners, pools, members; nothing is added piecemeal afterwards.
    assert_eq!(count(&log, "POST", "/lbaas/loadbalancers"), 1);
    for child in ["/lbaas/listeners", "/lbaas/pools", "/lbaas/healthmonitors"] {
        assert_eq!(count(&log, "POST", child), 0, "{child}: {:?}", writes(&log));
    }
    assert_eq!(count(&log, "PUT", "/members"), 0);
    // Nothing was sent while the load balancer was PENDING: Octavia never answered 409.
    assert_eq!(conflicts(&log), 0, "{:?}", writes(&log));
    assert!(passes.len() > 1, "the create is followed by requeues");
    assert!(passes[0].requeue_after.is_some());

    let id = lb_id(&svc);
    let lb = c.lb(&id).await.expect("lb");
    assert_eq!(lb.name, "kube_service_test_default_web");
    assert_eq!(
        lb.description,
        "Kubernetes external service default/web from cluster test"
    );
    assert!(
        lb.tags
            .contains(&"kube_service_test_default_web".to_owned())
    );
    // kos-ccm's own key, never kos's `kos-cluster` (issue 19 item 5).
    assert!(lb.tags.contains(&"kos-ccm-cluster=test".to_owned()));
    assert!(!lb.tags.iter().any(|t| t.starts_with("kos-cluster=")));
    let listeners = c.listeners(&id).await;
    assert_eq!(
        listeners
            .iter()
            .map(|l| (l.protocol.clone(), l.protocol_port, l.name.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (
                Protocol::Tcp,
                80,
                "listener_0_kube_service_test_default_web"
            ),
            (
                Protocol::Tcp,
                443,
                "listener_1_kube_service_test_default_web"
            )
        ]
    );
    let pool = c
        .pool(listeners[1].default_pool_id.as_deref().expect("pool"))
        .await;
    assert_eq!(pool.name, "pool_1_kube_service_test_default_web");
    let members = c.members(&pool.id).await;
    assert_eq!(
        members
            .iter()
            .map(|m| (m.name.as_str(), m.address.as_str(), m.protocol_port))
            .collect::<Vec<_>>(),
        vec![
            ("node-1", "10.10.0.11", 30443),
            ("node-2", "10.10.0.12", 30443)
        ]
    );
    assert!(c.monitor(&pool).await.is_none(), "create-monitor is off");

    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0].port_id, lb.vip_port_id);
    assert_eq!(
        fips[0].description,
        "Floating IP for Kubernetes external service default/web from cluster test"
    );
    let last = passes.last().expect("pass");
    let ingress = &last
        .status
        .as_ref()
        .expect("status")
        .ingress
        .as_ref()
        .expect("ingress")[0];
    assert_eq!(
        ingress.ip.as_deref(),
        Some(fips[0].floating_ip_address.as_str())
    );
    assert_eq!(ingress.ip_mode.as_deref(), Some("VIP"));
    assert_eq!(
        last.annotations.get(a::LOAD_BALANCER_ADDRESS),
        Some(&fips[0].floating_ip_address)
    );
    assert!(last.has_event(reasons::ENSURED));
    assert!(passes[0].has_event(reasons::CREATING));

    // Deleting removes the load balancer and the floating IP kos-ccm made.
    delete(&lbs, &svc).await;
    assert!(c.lbs().await.is_empty());
    assert!(c.fips().await.is_empty());
}

#[tokio::test]
async fn an_internal_service_gets_its_vip_and_switching_releases_only_our_floating_ip() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("db", &[("TCP", 5432, 30432)]);
    annotate(&mut svc, a::INTERNAL, "true");
    converge(&lbs, &mut svc, &nodes(1)).await;
    let lb = c.lb(&lb_id(&svc)).await.expect("lb");
    assert_eq!(Some(address(&svc)), lb.vip_address);
    assert!(c.fips().await.is_empty());

    // External: a floating IP appears.
    annotate(&mut svc, a::INTERNAL, "false");
    converge(&lbs, &mut svc, &nodes(1)).await;
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(address(&svc), fips[0].floating_ip_address);

    // Internal again: the floating IP kos-ccm made is deleted.
    annotate(&mut svc, a::INTERNAL, "true");
    let passes = converge(&lbs, &mut svc, &nodes(1)).await;
    assert!(c.fips().await.is_empty(), "{:#?}", all_events(&passes));
    assert_eq!(Some(address(&svc)), lb.vip_address);

    // With keep-floatingip, going internal only detaches it.
    annotate(&mut svc, a::INTERNAL, "false");
    converge(&lbs, &mut svc, &nodes(1)).await;
    annotate(&mut svc, a::KEEP_FLOATING_IP, "true");
    annotate(&mut svc, a::INTERNAL, "true");
    converge(&lbs, &mut svc, &nodes(1)).await;
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0].port_id, None);
}

#[tokio::test]
async fn protocol_annotations_pick_the_upstream_listener_and_pool_protocols() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut xff = service("xff", &[("TCP", 80, 30080)]);
    annotate(&mut xff, a::X_FORWARDED_FOR, "true");
    annotate(&mut xff, a::LB_METHOD, "LEAST_CONNECTIONS");
    annotate(&mut xff, a::CONNECTION_LIMIT, "1000");
    annotate(&mut xff, a::TIMEOUT_CLIENT_DATA, "120000");
    annotate(&mut xff, a::TIMEOUT_TCP_INSPECT, "10");
    annotate(&mut xff, a::HOSTNAME, "web.example.com");
    annotate(&mut xff, a::MEMBER_SUBNET_ID, &c.subnet);
    spec(&mut xff).session_affinity = Some("ClientIP".into());
    let passes = converge(&lbs, &mut xff, &nodes(1)).await;
    let l = &c.listeners(&lb_id(&xff)).await[0];
    assert_eq!(l.protocol, Protocol::Http);
    assert_eq!(
        l.insert_headers.get("X-Forwarded-For").map(String::as_str),
        Some("true")
    );
    assert_eq!(l.connection_limit, Some(1000));
    assert_eq!(l.timeouts.timeout_client_data, Some(120_000));
    assert_eq!(l.timeouts.timeout_member_connect, Some(5_000));
    assert_eq!(l.timeouts.timeout_tcp_inspect, Some(10));
    let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
    assert_eq!(pool.protocol, Protocol::Http);
    assert_eq!(pool.lb_algorithm, LbAlgorithm::LeastConnections);
    assert_eq!(
        pool.session_persistence.as_ref().map(|p| p.kind.as_str()),
        Some("SOURCE_IP")
    );
    assert_eq!(
        c.members(&pool.id).await[0].subnet_id.as_deref(),
        Some(c.subnet.as_str())
    );
    let status = passes
        .last()
        .and_then(|o| o.status.clone())
        .expect("status");
    let ingress = &status.ingress.expect("ingress")[0];
    assert_eq!(ingress.hostname.as_deref(), Some("web.example.com"));
    assert_eq!(ingress.ip, None, "the hostname annotation replaces the IP");
    assert!(
        passes
            .last()
            .expect("pass")
            .annotations
            .contains_key(a::LOAD_BALANCER_ADDRESS)
    );

    // Settings changed on a live load balancer are applied in place.
    annotate(&mut xff, a::LB_METHOD, "SOURCE_IP");
    annotate(&mut xff, a::CONNECTION_LIMIT, "-1");
    spec(&mut xff).session_affinity = Some("None".into());
    converge(&lbs, &mut xff, &nodes(1)).await;
    let l = &c.listeners(&lb_id(&xff)).await[0];
    assert_eq!(l.connection_limit, Some(-1));
    let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
    assert_eq!(pool.lb_algorithm, LbAlgorithm::SourceIp);
    assert!(pool.session_persistence.is_none());

    let tls_ref = "https://kms.example/v1/containers/6a4b1c2d-1111-2222-3333-444455556666";
    let mut tls = service("tls", &[("TCP", 443, 30443)]);
    annotate(&mut tls, a::DEFAULT_TLS_CONTAINER_REF, tls_ref);
    converge(&lbs, &mut tls, &nodes(1)).await;
    let l = &c.listeners(&lb_id(&tls)).await[0];
    assert_eq!(l.protocol, Protocol::TerminatedHttps);
    assert_eq!(l.default_tls_container_ref.as_deref(), Some(tls_ref));

    let mut proxy = service("proxy", &[("TCP", 80, 30081)]);
    annotate(&mut proxy, a::PROXY_PROTOCOL, "v2");
    let passes = converge(&lbs, &mut proxy, &nodes(1)).await;
    let l = &c.listeners(&lb_id(&proxy)).await[0];
    assert_eq!(l.protocol, Protocol::Tcp);
    let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
    assert_eq!(pool.protocol, Protocol::ProxyV2);
    let status = passes
        .last()
        .and_then(|o| o.status.clone())
        .expect("status");
    assert_eq!(
        status.ingress.expect("ingress")[0].ip_mode.as_deref(),
        Some("Proxy"),
        "PROXY protocol must keep in-cluster clients on the load balancer (KEP-1860)"
    );
}

#[tokio::test]
async fn changing_ports_adds_and_removes_listeners_and_moves_members() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut svc, &nodes(2)).await;
    let id = lb_id(&svc);

    spec(&mut svc).ports = Some(ports_of(&[("TCP", 80, 31080), ("TCP", 8080, 30880)]));
    converge(&lbs, &mut svc, &nodes(2)).await;
    let listeners = c.listeners(&id).await;
    assert_eq!(
        listeners
            .iter()
            .map(|l| l.protocol_port)
            .collect::<Vec<_>>(),
        vec![80, 8080]
    );
    for (l, node_port) in listeners.iter().zip([31080, 30880]) {
        let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
        let ports: Vec<u16> = c
            .members(&pool.id)
            .await
            .iter()
            .map(|m| m.protocol_port)
            .collect();
        assert_eq!(ports, vec![node_port, node_port]);
    }

    spec(&mut svc).ports = Some(ports_of(&[("TCP", 8080, 30880)]));
    converge(&lbs, &mut svc, &nodes(2)).await;
    let listeners = c.listeners(&id).await;
    assert_eq!(
        listeners
            .iter()
            .map(|l| l.protocol_port)
            .collect::<Vec<_>>(),
        vec![8080]
    );
    // The removed port's pool went with its listener.
    let pools = c
        .session
        .load_balancer()
        .list_pools(&id)
        .await
        .expect("pools");
    assert_eq!(pools.len(), 1);
}

#[tokio::test]
async fn services_share_a_load_balancer_within_max_shared_lb_and_delete_in_any_order() {
    let c = cloud().await;
    let lbs = c.controller("test", "max-shared-lb = 2\n");
    let mut owner = service("owner", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut owner, &nodes(2)).await;
    let id = lb_id(&owner);
    let fip = address(&owner);

    let mut second = service("second", &[("TCP", 8080, 30880)]);
    annotate(&mut second, a::LOAD_BALANCER_ID, &id);
    converge(&lbs, &mut second, &nodes(2)).await;
    assert_eq!(address(&second), fip, "the shared load balancer's address");
    let lb = c.lb(&id).await.expect("lb");
    assert!(
        lb.tags
            .contains(&"kube_service_test_default_second".to_owned())
    );
    let listeners = c.listeners(&id).await;
    assert_eq!(listeners.len(), 2);
    assert!(
        listeners[1]
            .tags
            .contains(&"kube_service_test_default_second".to_owned())
    );

    // A third Service exceeds max-shared-lb: a warning, and nothing changes.
    let mut third = service("third", &[("TCP", 9090, 30990)]);
    annotate(&mut third, a::LOAD_BALANCER_ID, &id);
    let start = c.seq();
    let o = lbs.ensure_service(&third, &nodes(2)).await.expect("ensure");
    assert!(o.has_event(reasons::SHARED_LIMIT), "{:#?}", o.events);
    assert!(writes(&c.log_since(start)).is_empty());
    assert!(!o.converged && o.status.is_none());

    // A port another Service uses on the load balancer is refused.
    let lbs3 = c.controller("test", "max-shared-lb = 3\n");
    let mut clash = service("clash", &[("TCP", 80, 30111)]);
    annotate(&mut clash, a::LOAD_BALANCER_ID, &id);
    let start = c.seq();
    let o = lbs3
        .ensure_service(&clash, &nodes(2))
        .await
        .expect("ensure");
    assert!(o.has_event(reasons::PORT_CONFLICT), "{:#?}", o.events);
    assert!(writes(&c.log_since(start)).is_empty());

    // The owner goes first: only its listener and tag; the load balancer and its address stay.
    delete(&lbs, &owner).await;
    let lb = c.lb(&id).await.expect("still there");
    assert!(
        !lb.tags
            .contains(&"kube_service_test_default_owner".to_owned())
    );
    assert_eq!(
        c.listeners(&id)
            .await
            .iter()
            .map(|l| l.protocol_port)
            .collect::<Vec<_>>(),
        vec![8080]
    );
    assert_eq!(c.fips().await.len(), 1);
    // The last one takes the load balancer (made by a CCM) and the floating IP with it.
    delete(&lbs, &second).await;
    assert!(c.lb(&id).await.is_none());
    assert!(c.fips().await.is_empty());
}

#[tokio::test]
async fn a_user_made_load_balancer_is_shared_and_survives_its_services() {
    let c = cloud().await;
    let api = c.session.load_balancer();
    let mut req = LoadBalancerCreate::new("my-edge", Vip::Subnet(c.subnet.clone()));
    req.tags = vec!["team=edge".into()];
    let user_lb = api.create_load_balancer(&req).await.expect("user LB");
    c.wait_active(&user_lb.id).await;
    let user_fip = c
        .session
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: c.public.clone(),
            port_id: user_lb.vip_port_id.clone(),
            description: Some("edge address".into()),
            ..Default::default()
        })
        .await
        .expect("user FIP");

    let lbs = c.controller("test", "max-shared-lb = 3\n");
    let mut x = service("x", &[("TCP", 80, 30080)]);
    annotate(&mut x, a::LOAD_BALANCER_ID, &user_lb.id);
    let mut y = service("y", &[("UDP", 53, 30053)]);
    annotate(&mut y, a::LOAD_BALANCER_ID, &user_lb.id);
    converge(&lbs, &mut x, &nodes(1)).await;
    converge(&lbs, &mut y, &nodes(1)).await;
    assert_eq!(address(&x), user_fip.floating_ip_address);
    assert_eq!(c.listeners(&user_lb.id).await.len(), 2);

    delete(&lbs, &x).await;
    delete(&lbs, &y).await;
    let lb = c
        .lb(&user_lb.id)
        .await
        .expect("the user's load balancer stays");
    assert_eq!(
        lb.tags,
        vec!["team=edge".to_owned()],
        "our tags are gone again"
    );
    assert!(c.listeners(&user_lb.id).await.is_empty());
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(
        fips[0].port_id, user_lb.vip_port_id,
        "the user's FIP is untouched"
    );
}

#[tokio::test]
async fn local_traffic_policy_always_gets_an_http_monitor_on_the_health_check_port() {
    // Regression for upstream #2866: create-monitor is off, ETP=Local still gets /healthz.
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("local", &[("TCP", 80, 30080)]);
    spec(&mut svc).external_traffic_policy = Some("Local".into());
    spec(&mut svc).health_check_node_port = Some(32100);
    let passes = converge(&lbs, &mut svc, &nodes(2)).await;
    assert!(passes.iter().any(|o| o.has_event(reasons::MONITOR_FORCED)));
    let l = &c.listeners(&lb_id(&svc)).await[0];
    let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
    let m = c.monitor(&pool).await.expect("monitor");
    assert_eq!(m.kind, MonitorType::Http);
    assert_eq!(m.url_path.as_deref(), Some("/healthz"));
    assert_eq!(m.name, "monitor_0_kube_service_test_default_local");
    for member in c.members(&pool.id).await {
        assert_eq!(member.monitor_port, Some(32100));
    }

    // Back to Cluster: the monitor goes (create-monitor is off) and members check their port.
    spec(&mut svc).external_traffic_policy = Some("Cluster".into());
    spec(&mut svc).health_check_node_port = None;
    converge(&lbs, &mut svc, &nodes(2)).await;
    let pool = c.pool(&pool.id).await;
    assert!(c.monitor(&pool).await.is_none());
    for member in c.members(&pool.id).await {
        assert_eq!(member.monitor_port.unwrap_or(30080), 30080);
    }
}

#[tokio::test]
async fn udp_and_sctp_ports_get_their_own_listeners_pools_and_monitors() {
    let c = cloud().await;
    let lbs = c.controller("test", "create-monitor = true\n");
    let mut svc = service(
        "dns",
        &[
            ("UDP", 53, 30053),
            ("TCP", 53, 30054),
            ("SCTP", 3868, 30055),
        ],
    );
    converge(&lbs, &mut svc, &nodes(2)).await;
    let listeners = c.listeners(&lb_id(&svc)).await;
    let mut seen = Vec::new();
    for l in &listeners {
        let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
        let m = c.monitor(&pool).await.expect("monitor");
        seen.push((l.protocol.clone(), pool.protocol.clone(), m.kind));
    }
    seen.sort_by_key(|s| s.0.to_string());
    assert_eq!(
        seen,
        vec![
            (Protocol::Sctp, Protocol::Sctp, MonitorType::Sctp),
            (Protocol::Tcp, Protocol::Tcp, MonitorType::Tcp),
            (Protocol::Udp, Protocol::Udp, MonitorType::UdpConnect)
        ]
    );
}

#[tokio::test]
async fn source_ranges_become_allowed_cidrs_and_follow_changes() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("ranged", &[("TCP", 80, 30080)]);
    spec(&mut svc).load_balancer_source_ranges = Some(vec!["203.0.113.0/24".into()]);
    converge(&lbs, &mut svc, &nodes(1)).await;
    let id = lb_id(&svc);
    assert_eq!(
        c.listeners(&id).await[0].allowed_cidrs,
        vec!["203.0.113.0/24"]
    );

    spec(&mut svc).load_balancer_source_ranges =
        Some(vec!["198.51.100.0/24".into(), "203.0.113.0/24".into()]);
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert_eq!(
        c.listeners(&id).await[0].allowed_cidrs,
        vec!["198.51.100.0/24", "203.0.113.0/24"]
    );

    spec(&mut svc).load_balancer_source_ranges = None;
    annotate(&mut svc, a::SOURCE_RANGES, "10.0.0.0/8");
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert_eq!(c.listeners(&id).await[0].allowed_cidrs, vec!["10.0.0.0/8"]);

    annotate(&mut svc, a::SOURCE_RANGES, "");
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert!(c.listeners(&id).await[0].allowed_cidrs.is_empty());
}

#[tokio::test]
async fn node_changes_cost_exactly_one_member_put_per_pool() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service(
        "web",
        &[("TCP", 80, 30080), ("TCP", 443, 30443), ("UDP", 53, 30053)],
    );
    converge(&lbs, &mut svc, &nodes(2)).await;
    let id = lb_id(&svc);
    let pools: Vec<String> = c
        .listeners(&id)
        .await
        .iter()
        .filter_map(|l| l.default_pool_id.clone())
        .collect();

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
    for (label, n) in [("add a node", 3), ("remove two", 1)] {
        let start = c.seq();
        converge(&lbs, &mut svc, &nodes(n)).await;
        let log = c.log_since(start);
        let puts = member_puts(&log);
        assert_eq!(puts.len(), 3, "{label}: one PUT per pool: {puts:?}");
        assert!(puts.values().all(|n| *n == 1), "{label}: {puts:?}");
        assert_eq!(
            writes(&log).len(),
            3,
            "{label}: nothing but the member PUTs: {:?}",
            writes(&log)
        );
        assert_eq!(conflicts(&log), 0);
        for p in &pools {
            assert_eq!(c.members(p).await.len(), n);
        }
    }
    // The same nodes again: no PUT at all.
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert!(writes(&c.log_since(start)).is_empty());
}

#[tokio::test]
async fn a_load_balancer_in_error_is_deleted_and_recreated_with_the_same_address() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut svc, &nodes(2)).await;
    let old = lb_id(&svc);
    let before = address(&svc);
    assert!(kos_sim::octavia::force_lb_error(
        &mut c.sim.app().cloud(),
        &old
    ));
    lbs.invalidate_snapshot();
    let passes = converge(&lbs, &mut svc, &nodes(2)).await;
    assert!(
        passes.iter().any(|o| o.has_event(reasons::IN_ERROR)),
        "{:#?}",
        all_events(&passes)
    );
    let new = lb_id(&svc);
    assert_ne!(old, new);
    assert!(c.lb(&old).await.is_none(), "the broken one is gone");
    let named: Vec<_> = c
        .lbs()
        .await
        .into_iter()
        .filter(|l| l.name == "kube_service_test_default_web")
        .collect();
    assert_eq!(named.len(), 1);
    assert_eq!(address(&svc), before, "the floating IP moved over");
    assert_eq!(c.fips().await.len(), 1);
}

#[tokio::test]
async fn a_409_from_octavia_is_a_requeue_and_the_service_converges() {
    // No client-side retries, so the reconcile itself sees every 409.
    let c = cloud_with(SimConfig::fast(), RetryPolicy::none()).await;
    let lbs = c.controller_with(c.session.clone(), settings("test"), "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut svc, &nodes(1)).await;
    let id = lb_id(&svc);
    c.sim
        .app()
        .fault_engine()
        .add(FaultRule {
            id: None,
            method: Some("PUT".into()),
            path: "/members$".into(),
            body: None,
            status: 409,
            probability: 1.0,
            count: Some(2),
            skip: 0,
            retry_after: None,
            after_side_effect: false,
            build_error: false,
            message: Some(format!(
                "Load Balancer {id} is immutable and cannot be updated."
            )),
        })
        .expect("fault");
    let start = c.seq();
    let passes = converge(&lbs, &mut svc, &nodes(2)).await;
    let log = c.log_since(start);
    assert_eq!(conflicts(&log), 2);
    let busy: Vec<&Outcome> = passes
        .iter()
        .filter(|o| o.writes.is_empty() && !o.converged)
        .collect();
    assert!(busy.len() >= 2, "each 409 was a requeue: {passes:#?}");
    assert!(
        busy.iter()
            .all(|o| o.requeue_after.is_some() && o.warnings().count() == 0)
    );
    let pool = c.listeners(&id).await[0]
        .default_pool_id
        .clone()
        .expect("pool");
    assert_eq!(c.members(&pool).await.len(), 2);
}

#[tokio::test]
async fn a_pending_load_balancer_is_requeued_without_a_write() {
    // Creates take ten minutes of real time here: every pass after the create sees
    // PENDING_CREATE, however slow the machine.
    let mut cfg = SimConfig::fast();
    cfg.latency.lb_create_secs = 600_000.0;
    let c = cloud_with(cfg, RetryPolicy::fast()).await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    let first = lbs.ensure_service(&svc, &nodes(1)).await.expect("create");
    apply(&mut svc, &first);
    assert!(
        first
            .writes
            .iter()
            .any(|w| w.starts_with("create load balancer"))
    );
    let start = c.seq();
    for _ in 0..3 {
        let o = lbs.ensure_service(&svc, &nodes(2)).await.expect("pass");
        assert!(o.requeue_after.is_some() && !o.converged, "{o:#?}");
        assert!(o.status.is_none(), "no address is reported before ACTIVE");
    }
    let log = c.log_since(start);
    assert!(writes(&log).is_empty(), "{:?}", writes(&log));
    // Each pass looked again (the snapshot is not reused while the load balancer is pending).
    assert_eq!(count(&log, "GET", "/lbaas/loadbalancers"), 3);
}

#[tokio::test]
async fn drift_is_put_back() {
    let c = cloud().await;
    let lbs = c.controller("test", "create-monitor = true\n");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    spec(&mut svc).load_balancer_source_ranges = Some(vec!["203.0.113.0/24".into()]);
    converge(&lbs, &mut svc, &nodes(2)).await;
    let id = lb_id(&svc);
    let fip = address(&svc);
    let api = c.session.load_balancer();
    let listener = c.listeners(&id).await.remove(0);
    let pool_id = listener.default_pool_id.clone().expect("pool");

    // A pool setting.
    api.update_pool(
        &pool_id,
        &PoolUpdate {
            lb_algorithm: Some(LbAlgorithm::LeastConnections),
            ..Default::default()
        },
    )
    .await
    .expect("drift pool");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    assert_eq!(c.pool(&pool_id).await.lb_algorithm, LbAlgorithm::RoundRobin);

    // A member removed, another one's weight changed.
    let members = c.members(&pool_id).await;
    api.delete_member(&pool_id, &members[0].id)
        .await
        .expect("drift member");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    assert_eq!(c.members(&pool_id).await.len(), 2);

    // A listener setting.
    api.update_listener(
        &listener.id,
        &ListenerUpdate {
            allowed_cidrs: Some(vec![]),
            connection_limit: Some(5),
            ..Default::default()
        },
    )
    .await
    .expect("drift listener");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let l = &c.listeners(&id).await[0];
    assert_eq!(l.allowed_cidrs, vec!["203.0.113.0/24"]);
    assert_eq!(l.connection_limit, Some(-1));

    // A health monitor setting.
    let pool = c.pool(&pool_id).await;
    api.update_health_monitor(
        pool.healthmonitor_id.as_deref().expect("monitor"),
        &kos_cloud::model::load_balancer::HealthMonitorUpdate {
            delay: Some(30),
            max_retries: Some(7),
            ..Default::default()
        },
    )
    .await
    .expect("drift monitor settings");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let m = c.monitor(&c.pool(&pool_id).await).await.expect("monitor");
    assert_eq!((m.delay, m.max_retries), (5, 1));

    // The health monitor deleted.
    let pool = c.pool(&pool_id).await;
    api.delete_health_monitor(pool.healthmonitor_id.as_deref().expect("monitor"))
        .await
        .expect("drift monitor");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    assert!(c.monitor(&c.pool(&pool_id).await).await.is_some());

    // The whole listener (and its pool) deleted.
    api.delete_pool(&pool_id).await.expect("drift pool delete");
    c.wait_active(&id).await;
    api.delete_listener(&listener.id)
        .await
        .expect("drift listener delete");
    c.wait_active(&id).await;
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let l = &c.listeners(&id).await[0];
    let pool = c.pool(l.default_pool_id.as_deref().expect("pool")).await;
    assert_eq!(c.members(&pool.id).await.len(), 2);
    assert!(c.monitor(&pool).await.is_some());

    // The floating IP detached: the same one comes back.
    let f = c.fips().await.remove(0);
    c.session
        .network()
        .disassociate_floating_ip(&f.id)
        .await
        .expect("drift fip");
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    assert_eq!(address(&svc), fip);
    let lb = c.lb(&id).await.expect("lb");
    assert_eq!(c.fips().await[0].port_id, lb.vip_port_id);

    // The floating IP deleted: a new one, and the status follows.
    c.session
        .network()
        .delete_floating_ip(&f.id)
        .await
        .expect("drift fip delete");
    lbs.invalidate_snapshot();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(address(&svc), fips[0].floating_ip_address);
}

#[tokio::test]
async fn two_clusters_in_one_project_never_touch_each_others_load_balancers() {
    // Upstream #2241 and #3102: same Service in two clusters of one project.
    let c = cloud().await;
    let id_settings = |cluster: &str, id: &str| LbSettings {
        cluster_id: Some(id.into()),
        ..settings(cluster)
    };
    // Two clusters that even share the default name, told apart by their ids, and a third.
    let a = c.controller_with(c.session.clone(), id_settings("kubernetes", "uid-a"), "");
    let b = c.controller_with(c.session.clone(), id_settings("kubernetes", "uid-b"), "");
    let other = c.controller_with(c.session.clone(), id_settings("staging", "uid-c"), "");
    let mut svc_a = service("web", &[("TCP", 80, 30080)]);
    let mut svc_b = service("web", &[("TCP", 80, 31080)]);
    converge(&a, &mut svc_a, &nodes(2)).await;
    converge(&b, &mut svc_b, &[node("b-1", "10.10.0.99")]).await;
    let (lb_a, lb_b) = (lb_id(&svc_a), lb_id(&svc_b));
    assert_ne!(lb_a, lb_b, "each cluster made its own");
    assert!(
        c.lb(&lb_b)
            .await
            .expect("b")
            .tags
            .contains(&"kos-cluster-id=uid-b".to_owned())
    );

    // Resyncs of A do not write anything, B's load balancer included.
    let start = c.seq();
    a.invalidate_snapshot();
    converge(&a, &mut svc_a, &nodes(2)).await;
    assert!(writes(&c.log_since(start)).is_empty());

    // A Service of a third cluster pointed at A's load balancer: a warning, no write.
    let mut stray = service("stray", &[("TCP", 9000, 30900)]);
    annotate(&mut stray, a::LOAD_BALANCER_ID, &lb_a);
    let start = c.seq();
    let o = other
        .ensure_service(&stray, &nodes(1))
        .await
        .expect("ensure");
    assert!(o.has_event(reasons::FOREIGN), "{:#?}", o.events);
    assert!(writes(&c.log_since(start)).is_empty());
    let o = other.ensure_service_deleted(&stray).await.expect("delete");
    assert!(o.converged && o.writes.is_empty());

    // Deleting in A leaves B's load balancer, members and floating IP alone.
    let b_fip = address(&svc_b);
    delete(&a, &svc_a).await;
    assert!(c.lb(&lb_a).await.is_none());
    let pool = c.listeners(&lb_b).await[0]
        .default_pool_id
        .clone()
        .expect("pool");
    assert_eq!(c.members(&pool).await[0].address, "10.10.0.99");
    assert!(
        c.fips()
            .await
            .iter()
            .any(|f| f.floating_ip_address == b_fip)
    );
    let start = c.seq();
    b.invalidate_snapshot();
    converge(&b, &mut svc_b, &[node("b-1", "10.10.0.99")]).await;
    assert!(writes(&c.log_since(start)).is_empty());
}

/// Member lists of pools, and batch member PUTs by pool, in a log.
fn member_calls(log: &[LogEntry]) -> (usize, BTreeMap<String, usize>) {
    let lists = log
        .iter()
        .filter(|e| e.method == "GET" && e.path.ends_with("/members"))
        .count();
    let mut puts: BTreeMap<String, usize> = BTreeMap::new();
    for e in log
        .iter()
        .filter(|e| e.method == "PUT" && e.path.ends_with("/members"))
    {
        *puts.entry(e.path.clone()).or_default() += 1;
    }
    (lists, puts)
}

/// What this controller wrote it knows: a new Service's pools are not listed when its load
/// balancer turns ACTIVE (the create carried the members), and a node join is one batch PUT per
/// pool and no member list afterwards (the pool's member ids count what was put).
#[tokio::test]
async fn a_node_join_is_one_member_put_per_pool_and_no_member_list() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut a = service("a", &[("TCP", 80, 30080), ("UDP", 53, 30053)]);
    let mut b = service("b", &[("TCP", 80, 30180)]);
    let start = c.seq();
    converge(&lbs, &mut a, &nodes(2)).await;
    converge(&lbs, &mut b, &nodes(2)).await;
    let (lists, _) = member_calls(&c.log_since(start));
    assert_eq!(
        lists, 0,
        "a created pool's members are known: {lists} lists"
    );

    for (label, n) in [("a node joins", 3), ("another joins", 4), ("two leave", 2)] {
        let start = c.seq();
        converge(&lbs, &mut a, &nodes(n)).await;
        converge(&lbs, &mut b, &nodes(n)).await;
        let log = c.log_since(start);
        let (lists, puts) = member_calls(&log);
        assert_eq!(puts.len(), 3, "{label}: every pool: {puts:?}");
        assert!(puts.values().all(|p| *p == 1), "{label}: {puts:?}");
        assert_eq!(lists, 0, "{label}: no pool's members listed");
        assert_eq!(writes(&log).len(), 3, "{label}: {:?}", writes(&log));
    }
    for pool in c.lbs().await.iter().flat_map(|l| l.pools.clone()) {
        assert_eq!(c.members(&pool.id).await.len(), 2);
    }
}

/// A resync through the shared snapshot (what the controller does: the snapshot forced out, then
/// a pass per Service) is one list per resource type and no write, whatever the number of
/// Services; no pool's members are listed while their ids are unchanged.
#[tokio::test]
async fn an_idle_resync_through_the_snapshot_is_one_list_per_type_and_no_write() {
    let c = cloud().await;
    let lbs = c.controller("test", "create-monitor = true\n");
    let ns = nodes(3);
    let mut services: Vec<Service> = (0..4)
        .map(|i| {
            let base = 30200 + 10 * i;
            service(
                &format!("s{i}"),
                &[("TCP", 80, base), ("UDP", 53, base + 1)],
            )
        })
        .collect();
    for s in &mut services {
        converge(&lbs, s, &ns).await;
    }
    for round in 0..2 {
        let start = c.seq();
        lbs.invalidate_snapshot();
        for s in &services {
            let o = lbs.ensure_service(s, &ns).await.expect("resync");
            assert!(o.converged && o.writes.is_empty(), "{round}: {o:#?}");
        }
        let log = c.log_since(start);
        assert!(writes(&log).is_empty(), "{round}: {:?}", writes(&log));
        let mut gets: Vec<&str> = log
            .iter()
            .filter(|e| e.method == "GET" && !e.path.starts_with("/identity"))
            .map(|e| e.operation.as_str())
            .collect();
        gets.sort_unstable();
        assert_eq!(gets.len(), 5, "{round}: one list per type: {gets:#?}");
        gets.dedup();
        assert_eq!(gets.len(), 5, "{round}: each type once: {gets:#?}");
    }
}

/// Idle resyncs, one after the other and however long since a pool's members were last listed,
/// are each one list per resource type and no write: with no deep verify (the default), members
/// are listed only on a sign of a change. A member changed by hand (its weight: the pool's member
/// ids stay) is such a sign through its load balancer's `updated_at` (Octavia locks the load
/// balancer for every member change): the next resync lists that load balancer's pools alone and
/// puts the weight back, and the resync after that is idle again (this process's own PUT is not read as someone
/// else's change). Before, a pool whose members looked as wanted was listed once its entry was
/// older than the verify interval: every other idle resync listed every pool.
#[tokio::test]
async fn idle_resyncs_list_no_members_and_a_hand_changed_member_is_put_back() {
    let c = cloud().await;
    let lbs = c.controller("test", "create-monitor = true\n");
    let ns = nodes(3);
    let mut services: Vec<Service> = (0..3)
        .map(|i| {
            let base = 30400 + 10 * i;
            service(
                &format!("i{i}"),
                &[("TCP", 80, base), ("UDP", 53, base + 1)],
            )
        })
        .collect();
    for s in &mut services {
        converge(&lbs, s, &ns).await;
    }
    // What the periodic resync does: the snapshot forced out, then a pass per Service.
    async fn resync(
        c: &Cloud,
        lbs: &LoadBalancers,
        services: &[Service],
        ns: &[Node],
    ) -> (Vec<LogEntry>, Vec<String>) {
        let start = c.seq();
        lbs.invalidate_snapshot();
        let mut wrote = Vec::new();
        for s in services {
            let o = lbs.ensure_service(s, ns).await.expect("resync");
            wrote.extend(o.writes);
        }
        (c.log_since(start), wrote)
    }
    fn idle(log: &[LogEntry], wrote: &[String], label: &str) {
        assert!(wrote.is_empty(), "{label}: {wrote:?}");
        assert!(writes(log).is_empty(), "{label}: {:?}", writes(log));
        let mut gets: Vec<&str> = log
            .iter()
            .filter(|e| e.method == "GET" && !e.path.starts_with("/identity"))
            .map(|e| e.operation.as_str())
            .collect();
        gets.sort_unstable();
        assert_eq!(gets.len(), 5, "{label}: one list per type: {gets:#?}");
        gets.dedup();
        assert_eq!(gets.len(), 5, "{label}: each type once: {gets:#?}");
    }
    // Time between resyncs is no sign of a change (a second here, 5 minutes by default).
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (log, wrote) = resync(&c, &lbs, &services, &ns).await;
        idle(&log, &wrote, &format!("idle resync {round}"));
    }

    // A member's weight changed by hand, in a later second than the load balancer's last
    // change (Octavia's timestamps have whole seconds).
    let id = lb_id(&services[0]);
    let pool_id = c.listeners(&id).await[0]
        .default_pool_id
        .clone()
        .expect("pool");
    let specs: Vec<MemberSpec> = c
        .members(&pool_id)
        .await
        .iter()
        .enumerate()
        .map(|(i, m)| MemberSpec {
            name: m.name.clone(),
            subnet_id: m.subnet_id.clone(),
            weight: Some(if i == 0 { 5 } else { 1 }),
            ..MemberSpec::new(m.address.clone(), m.protocol_port)
        })
        .collect();
    c.session
        .load_balancer()
        .replace_members(&pool_id, &specs)
        .await
        .expect("a weight changed by hand");
    c.wait_active(&id).await;
    assert!(
        c.members(&pool_id)
            .await
            .iter()
            .any(|m| m.weight == Some(5))
    );
    let (log, wrote) = resync(&c, &lbs, &services, &ns).await;
    let label = "the resync after the change";
    let (lists, _) = member_calls(&log);
    // The sign is the load balancer's: both of its pools, and no other.
    assert_eq!(
        lists, 2,
        "{label}: that load balancer's pools alone are listed"
    );
    assert_eq!(wrote.len(), 1, "{label}: the weight put back: {wrote:?}");
    converge(&lbs, &mut services[0], &ns).await;
    assert!(
        c.members(&pool_id)
            .await
            .iter()
            .all(|m| m.weight == Some(1)),
        "the weight is put back"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (log, wrote) = resync(&c, &lbs, &services, &ns).await;
    idle(&log, &wrote, "the next idle resync");
}

#[tokio::test]
async fn a_no_op_resync_makes_no_writes_and_one_list_per_resource_type() {
    let c = cloud().await;
    let lbs = c.controller("test", "create-monitor = true\n");
    let mut services: Vec<Service> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let base = 30000 + 10 * i32::try_from(i).expect("small");
            service(n, &[("TCP", 80, base), ("UDP", 53, base + 1)])
        })
        .collect();
    let ns = nodes(3);
    // Converge all three in parallel, as --concurrent-service-syncs workers would.
    let lbs_ref = &lbs;
    let ns_ref = &ns;
    futures::future::join_all(
        services
            .iter_mut()
            .map(|s| async move { converge(lbs_ref, s, ns_ref).await }),
    )
    .await;

    let start = c.seq();
    let observed = lbs.observe().await.expect("observe");
    for s in &services {
        let o = lbs.ensure(s, &ns, &observed).await.expect("resync");
        assert!(o.converged && o.writes.is_empty(), "{:#?}", o);
        assert!(o.warnings().count() == 0, "{:#?}", o.events);
    }
    let log = c.log_since(start);
    assert!(writes(&log).is_empty(), "{:?}", writes(&log));
    let gets: Vec<&str> = log
        .iter()
        .filter(|e| e.method == "GET")
        .map(|e| e.operation.as_str())
        .collect();
    assert_eq!(gets.len(), 5, "{gets:#?}");
    for suffix in [
        "/lbaas/loadbalancers",
        "/lbaas/listeners",
        "/lbaas/pools",
        "/lbaas/healthmonitors",
        "/floatingips",
    ] {
        assert_eq!(
            gets.iter().filter(|g| g.ends_with(suffix)).count(),
            1,
            "{suffix}: {gets:#?}"
        );
    }
}

#[tokio::test]
async fn load_balancer_ip_reuses_a_floating_ip_of_the_project_and_never_deletes_it() {
    let c = cloud().await;
    let mine = c
        .session
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: c.public.clone(),
            description: Some("reserved for web".into()),
            ..Default::default()
        })
        .await
        .expect("fip");
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    spec(&mut svc).load_balancer_ip = Some(mine.floating_ip_address.clone());
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert_eq!(address(&svc), mine.floating_ip_address);
    assert_eq!(c.fips().await.len(), 1, "no new floating IP");
    delete(&lbs, &svc).await;
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1, "a user's floating IP is never deleted");
    assert_eq!(fips[0].id, mine.id);

    // An address that is not a floating IP of the project: Neutron's policy refuses to make it.
    let mut other = service("other", &[("TCP", 80, 30081)]);
    spec(&mut other).load_balancer_ip = Some("172.24.4.200".into());
    let mut saw = None;
    for _ in 0..200 {
        let o = lbs.ensure_service(&other, &nodes(1)).await.expect("ensure");
        apply(&mut other, &o);
        if let Some(w) = o
            .warnings()
            .find(|w| w.reason == reasons::FLOATING_IP_FAILED)
        {
            saw = Some(w.note.clone());
            break;
        }
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(10))).await;
    }
    let note = saw.expect("a warning about the address");
    assert!(note.contains("only admins choose the address"), "{note}");
}

#[tokio::test]
async fn keep_floatingip_keeps_the_address_after_the_service_is_deleted() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    annotate(&mut svc, a::KEEP_FLOATING_IP, "true");
    converge(&lbs, &mut svc, &nodes(1)).await;
    let kept = address(&svc);
    delete(&lbs, &svc).await;
    assert!(c.lbs().await.is_empty());
    let fips = c.fips().await;
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0].floating_ip_address, kept);
    assert_eq!(fips[0].port_id, None);
}

#[tokio::test]
async fn a_load_balancer_made_by_the_upstream_ccm_is_adopted_not_recreated() {
    // What the upstream CCM leaves: its name, its one tag, an untagged listener (pre-tag era).
    let c = cloud().await;
    let api = c.session.load_balancer();
    let name = "kube_service_test_default_web";
    let mut req = LoadBalancerCreate::new(name, Vip::Subnet(c.subnet.clone()));
    req.tags = vec![name.into()];
    let lb = api.create_load_balancer(&req).await.expect("upstream LB");
    c.wait_active(&lb.id).await;
    let l = api
        .create_listener(&ListenerCreate::new(
            &lb.id,
            format!("listener_0_{name}"),
            Protocol::Tcp,
            80,
        ))
        .await
        .expect("listener");
    c.wait_active(&lb.id).await;
    let p = api
        .create_pool(&PoolCreate::new(
            PoolParent::Listener(l.id.clone()),
            format!("pool_0_{name}"),
            Protocol::Tcp,
            LbAlgorithm::RoundRobin,
        ))
        .await
        .expect("pool");
    c.wait_active(&lb.id).await;
    api.replace_members(
        &p.id,
        &[MemberSpec {
            name: "node-1".into(),
            ..MemberSpec::new("10.10.0.11", 30080)
        }],
    )
    .await
    .expect("members");
    c.wait_active(&lb.id).await;

    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(1)).await;
    let log = c.log_since(start);
    assert_eq!(lb_id(&svc), lb.id, "adopted");
    assert_eq!(count(&log, "POST", "/lbaas/loadbalancers"), 0);
    assert_eq!(c.listeners(&lb.id).await[0].id, l.id, "its listener kept");
    let tags = c.lb(&lb.id).await.expect("lb").tags;
    assert!(
        tags.contains(&"kos-ccm-cluster=test".to_owned()),
        "{tags:?}"
    );
}

// ------------------------------------------- what a Service may not reach (issue 19, item 5)

/// What `kos up` makes for the cluster's API: a load balancer named and tagged as kos names and
/// tags everything (`kos-<cluster>-<id>`, `kos-cluster=<cluster>`, `kos-id=<id>`), with its 6443
/// listener, and a floating IP described and tagged alike, not yet associated.
async fn kos_api_endpoint(c: &Cloud, cluster: &str) -> (LoadBalancer, FloatingIp) {
    let api = c.session.load_balancer();
    let mut req = LoadBalancerCreate::new(
        format!("kos-{cluster}-api-lb"),
        Vip::Subnet(c.subnet.clone()),
    );
    req.tags = vec![format!("kos-cluster={cluster}"), "kos-id=api-lb".into()];
    req.listeners = vec![ListenerCreate::new(
        "",
        format!("kos-{cluster}-api-listener"),
        Protocol::Tcp,
        6443,
    )];
    let lb = api.create_load_balancer(&req).await.expect("API LB");
    c.wait_active(&lb.id).await;
    let fip = c
        .session
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: c.public.clone(),
            description: Some(format!("kos-{cluster}-api-fip")),
            tags: vec![format!("kos-cluster={cluster}"), "kos-id=api-fip".into()],
            ..Default::default()
        })
        .await
        .expect("API FIP");
    (lb, fip)
}

/// A few passes of a Service that must be refused: every pass warns naming `what`, none writes
/// to the cloud or gives the Service an address.
async fn refused(c: &Cloud, lbs: &LoadBalancers, svc: &Service, what: &str) -> Vec<Outcome> {
    let start = c.seq();
    let mut passes = Vec::new();
    for _ in 0..3 {
        lbs.invalidate_snapshot();
        let o = lbs.ensure_service(svc, &nodes(1)).await.expect("ensure");
        trace("refused", svc, &o);
        assert!(
            o.warnings().any(|w| w.note.contains(what)),
            "no warning naming {what}: {:#?}",
            o.events
        );
        assert!(o.status.is_none() && !o.converged, "{o:#?}");
        passes.push(o);
    }
    assert_eq!(writes(&c.log_since(start)), Vec::<String>::new());
    passes
}

fn in_namespace(mut svc: Service, ns: &str) -> Service {
    svc.metadata.namespace = Some(ns.into());
    svc
}

/// The security review's finding: `kos-cluster=<name>` on the API load balancer was read as
/// kos-ccm's own tag, so a Service of any namespace naming its id got a listener on it.
#[tokio::test]
async fn the_clusters_api_load_balancer_is_never_a_services() {
    let c = cloud().await;
    let (api_lb, _) = kos_api_endpoint(&c, "test").await;
    let lbs = c.controller("test", "max-shared-lb = 5\n");
    for ns in ["default", "kube-system", "tenant"] {
        let mut svc = in_namespace(service("grab", &[("TCP", 8443, 30443)]), ns);
        annotate(&mut svc, a::LOAD_BALANCER_ID, &api_lb.id);
        refused(&c, &lbs, &svc, a::LOAD_BALANCER_ID).await;
        // Deleting the Service does not touch it either.
        let start = c.seq();
        let o = lbs.ensure_service_deleted(&svc).await.expect("delete");
        assert!(o.converged, "{o:#?}");
        assert_eq!(writes(&c.log_since(start)), Vec::<String>::new());
    }
    let lb = c.lb(&api_lb.id).await.expect("the API LB stays");
    assert_eq!(lb.tags, api_lb.tags, "its tags untouched");
    let ports: Vec<u16> = c
        .listeners(&api_lb.id)
        .await
        .iter()
        .map(|l| l.protocol_port)
        .collect();
    assert_eq!(ports, vec![6443], "no listener but its own");
}

#[tokio::test]
async fn a_service_never_joins_another_namespaces_load_balancer() {
    let c = cloud().await;
    let lbs = c.controller("test", "max-shared-lb = 5\n");
    let mut owner = in_namespace(service("api", &[("TCP", 80, 30080)]), "payments");
    converge(&lbs, &mut owner, &nodes(1)).await;
    let id = lb_id(&owner);

    let mut stray = in_namespace(service("peek", &[("TCP", 8080, 30880)]), "web");
    annotate(&mut stray, a::LOAD_BALANCER_ID, &id);
    let passes = refused(&c, &lbs, &stray, a::LOAD_BALANCER_ID).await;
    assert!(
        all_events(&passes).iter().any(
            |(_, n)| n.contains("payments/api") && n.contains("enable-cross-namespace-sharing")
        ),
        "{:#?}",
        all_events(&passes)
    );
    assert_eq!(c.listeners(&id).await.len(), 1);

    // In its own namespace it may share, and so may anyone where cloud.conf allows it.
    let mut neighbour = in_namespace(service("batch", &[("TCP", 8081, 30881)]), "payments");
    annotate(&mut neighbour, a::LOAD_BALANCER_ID, &id);
    converge(&lbs, &mut neighbour, &nodes(1)).await;
    let open = c.controller(
        "test",
        "max-shared-lb = 5\nenable-cross-namespace-sharing = true\n",
    );
    converge(&open, &mut stray, &nodes(1)).await;
    assert_eq!(address(&stray), address(&owner));
    assert_eq!(c.listeners(&id).await.len(), 3);
}

/// An upstream load balancer of the pre-tag era carries no Service tag: deleting a Service of
/// another namespace pointed at it took the whole load balancer along.
#[tokio::test]
async fn deleting_a_refused_service_never_deletes_another_namespaces_load_balancer() {
    let c = cloud().await;
    let api = c.session.load_balancer();
    let req = LoadBalancerCreate::new(
        "kube_service_test_payments_api",
        Vip::Subnet(c.subnet.clone()),
    );
    let theirs = api.create_load_balancer(&req).await.expect("upstream LB");
    c.wait_active(&theirs.id).await;
    let lbs = c.controller("test", "");
    let mut stray = in_namespace(service("peek", &[("TCP", 8080, 30880)]), "web");
    annotate(&mut stray, a::LOAD_BALANCER_ID, &theirs.id);
    refused(&c, &lbs, &stray, a::LOAD_BALANCER_ID).await;
    let start = c.seq();
    delete(&lbs, &stray).await;
    assert_eq!(writes(&c.log_since(start)), Vec::<String>::new());
    assert!(
        c.lb(&theirs.id).await.is_some(),
        "their load balancer stays"
    );
}

/// The API floating IP is free between its allocation and its association; `loadBalancerIP`
/// attached any free floating IP of the project.
#[tokio::test]
async fn load_balancer_ip_never_takes_kos_s_or_another_service_s_floating_ip() {
    let c = cloud().await;
    let (_, api_fip) = kos_api_endpoint(&c, "test").await;
    let lbs = c.controller("test", "");
    let mut svc = in_namespace(service("grab", &[("TCP", 80, 30080)]), "tenant");
    spec(&mut svc).load_balancer_ip = Some(api_fip.floating_ip_address.clone());
    let warned = wait_for_warning(&lbs, &mut svc, "spec.loadBalancerIP").await;
    assert!(warned.contains("kos made it"), "{warned}");
    let still = c.fips().await;
    let f = still.iter().find(|f| f.id == api_fip.id).expect("API FIP");
    assert_eq!(f.port_id, None, "the API floating IP stays free for kos");

    // Another Service's floating IP, kept after its Service went: not a third Service's to take.
    let mut kept = service("db", &[("TCP", 5432, 30432)]);
    annotate(&mut kept, a::KEEP_FLOATING_IP, "true");
    converge(&lbs, &mut kept, &nodes(1)).await;
    let kept_ip = address(&kept);
    delete(&lbs, &kept).await;
    let mut other = in_namespace(service("other", &[("TCP", 80, 30081)]), "tenant");
    spec(&mut other).load_balancer_ip = Some(kept_ip.clone());
    let warned = wait_for_warning(&lbs, &mut other, "spec.loadBalancerIP").await;
    assert!(warned.contains("another Service"), "{warned}");
    assert!(
        c.fips()
            .await
            .iter()
            .any(|f| f.floating_ip_address == kept_ip && f.port_id.is_none())
    );
    // Its own Service, made again, gets it back.
    let mut again = service("db", &[("TCP", 5432, 30432)]);
    spec(&mut again).load_balancer_ip = Some(kept_ip.clone());
    converge(&lbs, &mut again, &nodes(1)).await;
    assert_eq!(address(&again), kept_ip);
}

/// Passes until a Warning naming `what` (the Service's own load balancer may be made meanwhile);
/// never a status address.
async fn wait_for_warning(lbs: &LoadBalancers, svc: &mut Service, what: &str) -> String {
    for _ in 0..200 {
        let o = lbs.ensure_service(svc, &nodes(1)).await.expect("ensure");
        trace("ensure", svc, &o);
        apply(svc, &o);
        assert!(o.status.is_none(), "an address: {o:#?}");
        if let Some(w) = o.warnings().find(|w| w.note.contains(what)) {
            return w.note.clone();
        }
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(10))).await;
    }
    panic!("no warning naming {what}");
}

/// Load balancers an older kos-ccm tagged with kos's key are still their Service's, and move to
/// kos-ccm's own key on the next pass.
#[tokio::test]
async fn an_older_kos_ccm_load_balancer_is_adopted_and_moved_to_the_new_tag() {
    let c = cloud().await;
    let api = c.session.load_balancer();
    let name = "kube_service_test_default_web";
    let mut req = LoadBalancerCreate::new(name, Vip::Subnet(c.subnet.clone()));
    req.tags = vec![name.into(), "kos-cluster=test".into()];
    let old = api.create_load_balancer(&req).await.expect("old LB");
    c.wait_active(&old.id).await;

    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert_eq!(lb_id(&svc), old.id, "adopted");
    assert_eq!(
        count(&c.log_since(start), "POST", "/lbaas/loadbalancers"),
        0
    );
    let tags = c.lb(&old.id).await.expect("lb").tags;
    assert!(
        tags.contains(&"kos-ccm-cluster=test".to_owned()),
        "{tags:?}"
    );
    assert!(!tags.contains(&"kos-cluster=test".to_owned()), "{tags:?}");
    delete(&lbs, &svc).await;
    assert!(c.lb(&old.id).await.is_none());
}

#[tokio::test]
async fn services_that_are_not_ours_cost_nothing() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut classed = service("classed", &[("TCP", 80, 30080)]);
    spec(&mut classed).load_balancer_class = Some("example.com/other".into());
    let mut cluster_ip = service("plain", &[("TCP", 80, 30080)]);
    spec(&mut cluster_ip).type_ = Some("ClusterIP".into());
    let mut bad = service("bad", &[("TCP", 80, 30080)]);
    annotate(&mut bad, a::TIMEOUT_CLIENT_DATA, "5s");
    let start = c.seq();
    let observed = kos_ccm::lb::Observed::empty();
    for s in [&classed, &cluster_ip] {
        let o = lbs.ensure(s, &nodes(1), &observed).await.expect("ensure");
        assert!(o.converged && o.events.is_empty() && o.status.is_none());
    }
    let o = lbs
        .ensure(&bad, &nodes(1), &observed)
        .await
        .expect("ensure");
    let w: Vec<_> = o.warnings().collect();
    assert_eq!(w.len(), 1);
    assert!(w[0].note.contains("timeout-client-data"), "{}", w[0].note);
    assert!(!o.converged && o.requeue_after.is_none());
    assert!(c.log_since(start).is_empty(), "not a single call");
}

#[tokio::test]
async fn a_serial_provider_gets_its_children_one_call_at_a_time() {
    let c = cloud().await;
    let lbs = c.controller(
        "test",
        "provider-requires-serial-api-calls = true\ncreate-monitor = true\n",
    );
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let log = c.log_since(start);
    assert_eq!(count(&log, "POST", "/lbaas/loadbalancers"), 1);
    assert_eq!(count(&log, "POST", "/lbaas/listeners"), 1);
    assert_eq!(count(&log, "POST", "/lbaas/pools"), 1);
    assert_eq!(count(&log, "POST", "/members"), 2, "{:?}", writes(&log));
    assert_eq!(count(&log, "PUT", "/members"), 0, "no batch update");
    assert_eq!(count(&log, "POST", "/lbaas/healthmonitors"), 1);
    assert_eq!(conflicts(&log), 0);

    // A node leaves: one member DELETE.
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(1)).await;
    let log = c.log_since(start);
    assert_eq!(writes(&log).len(), 1, "{:?}", writes(&log));
    assert_eq!(count(&log, "DELETE", "/members/{id}"), 1);
}

#[tokio::test]
async fn without_a_configured_subnet_the_vip_goes_to_the_nodes_subnet() {
    let c = cloud().await;
    let cfg = Arc::new(
        CloudConfig::parse(
            "cloud.conf",
            &format!("{AUTH}[LoadBalancer]\nfloating-network-id = {}\n", c.public),
        )
        .expect("cloud.conf")
        .config,
    );
    let lbs = LoadBalancers::new(c.session.clone(), cfg, settings("test"));
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut svc, &nodes(2)).await;
    let lb = c.lb(&lb_id(&svc)).await.expect("lb");
    assert_eq!(lb.vip_subnet_id.as_deref(), Some(c.subnet.as_str()));
    let pool = c.listeners(&lb.id).await[0]
        .default_pool_id
        .clone()
        .expect("pool");
    assert_eq!(
        c.members(&pool).await[0].subnet_id.as_deref(),
        Some(c.subnet.as_str()),
        "members default to the VIP subnet"
    );
}

#[tokio::test]
async fn a_class_selects_the_floating_subnet_by_name_pattern() {
    let c = cloud().await;
    let lbs = c.controller(
        "test",
        "[LoadBalancerClass \"public\"]\nfloating-subnet = public-*\n\
         [LoadBalancerClass \"nowhere\"]\nfloating-subnet = private-*\n",
    );
    let mut good = service("good", &[("TCP", 80, 30080)]);
    annotate(&mut good, a::CLASS, "public");
    converge(&lbs, &mut good, &nodes(1)).await;
    assert!(address(&good).starts_with("172.24.4."));

    let mut bad = service("bad", &[("TCP", 80, 30081)]);
    annotate(&mut bad, a::CLASS, "nowhere");
    let mut note = None;
    for _ in 0..200 {
        let o = lbs.ensure_service(&bad, &nodes(1)).await.expect("ensure");
        apply(&mut bad, &o);
        if let Some(w) = o
            .warnings()
            .find(|w| w.reason == reasons::FLOATING_IP_FAILED)
        {
            note = Some(w.note.clone());
            break;
        }
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(10))).await;
    }
    let note = note.expect("a warning about the floating subnet");
    assert!(note.contains("no subnet of floating network"), "{note}");
}

#[tokio::test]
async fn create_only_settings_go_into_the_create_and_changes_are_warned_about() {
    let c = cloud().await;
    let flavor = c
        .session
        .load_balancer()
        .list_flavors()
        .await
        .expect("flavors")
        .remove(0);
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    annotate(&mut svc, a::FLAVOR_ID, &flavor.id);
    annotate(&mut svc, a::AVAILABILITY_ZONE, "az-1");
    converge(&lbs, &mut svc, &nodes(1)).await;
    let lb = c.lb(&lb_id(&svc)).await.expect("lb");
    assert_eq!(lb.flavor_id.as_deref(), Some(flavor.id.as_str()));
    assert_eq!(lb.availability_zone.as_deref(), Some("az-1"));

    annotate(&mut svc, a::AVAILABILITY_ZONE, "az-2");
    let start = c.seq();
    let passes = converge(&lbs, &mut svc, &nodes(1)).await;
    assert!(
        passes.iter().any(|o| o.has_event(reasons::IMMUTABLE)),
        "{:#?}",
        all_events(&passes)
    );
    assert!(writes(&c.log_since(start)).is_empty());
}

#[tokio::test]
async fn a_service_with_bad_annotations_can_still_be_deleted() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let mut svc = service("web", &[("TCP", 80, 30080)]);
    converge(&lbs, &mut svc, &nodes(1)).await;
    annotate(&mut svc, a::TIMEOUT_CLIENT_DATA, "forever");
    annotate(&mut svc, a::INTERNAL, "maybe");
    let o = lbs.ensure_service(&svc, &nodes(1)).await.expect("ensure");
    assert!(o.has_event(reasons::INVALID) && o.writes.is_empty());
    delete(&lbs, &svc).await;
    assert!(c.lbs().await.is_empty());
    assert!(c.fips().await.is_empty());
}

#[tokio::test]
async fn the_vip_goes_on_the_port_or_network_the_annotations_name() {
    let c = cloud().await;
    let net = c.session.network();
    let network = net
        .get_subnet(&c.subnet)
        .await
        .expect("subnet")
        .expect("exists")
        .network_id;
    let port = net
        .create_port(&kos_cloud::model::network::PortCreate::new(
            &network, "my-vip",
        ))
        .await
        .expect("port");
    let lbs = c.controller("test", "");
    let mut on_port = service("on-port", &[("TCP", 80, 30080)]);
    annotate(&mut on_port, a::PORT_ID, &port.id);
    let passes = converge(&lbs, &mut on_port, &nodes(1)).await;
    let lb = c.lb(&lb_id(&on_port)).await.expect("lb");
    assert_eq!(lb.vip_port_id.as_deref(), Some(port.id.as_str()));
    assert!(
        all_events(&passes)
            .iter()
            .any(|(r, n)| *r == reasons::IGNORED && n.contains("port-id")),
        "the configured subnet-id is not used for the VIP, and the user hears it"
    );
    let fips = c.fips().await;
    assert_eq!(fips[0].port_id.as_deref(), Some(port.id.as_str()));

    let mut on_net = service("on-net", &[("TCP", 80, 30081)]);
    annotate(&mut on_net, a::NETWORK_ID, &network);
    let lbs_no_subnet = LoadBalancers::new(
        c.session.clone(),
        Arc::new(
            CloudConfig::parse(
                "cloud.conf",
                &format!("{AUTH}[LoadBalancer]\nfloating-network-id = {}\n", c.public),
            )
            .expect("cloud.conf")
            .config,
        ),
        settings("test"),
    );
    converge(&lbs_no_subnet, &mut on_net, &nodes(1)).await;
    let lb = c.lb(&lb_id(&on_net)).await.expect("lb");
    assert_eq!(lb.vip_network_id.as_deref(), Some(network.as_str()));
}

// ---------------------------------------------------------------- manage-security-groups

/// The Neutron port of each node address on the nodes' subnet, as Nova would have made it.
async fn node_ports(c: &Cloud, ips: &[&str]) -> Vec<String> {
    let net = c.session.network();
    let network = net
        .get_subnet(&c.subnet)
        .await
        .expect("subnet")
        .expect("subnet exists")
        .network_id;
    let mut ids = Vec::new();
    for ip in ips {
        let mut req = PortCreate::new(&network, format!("node-{ip}"));
        req.fixed_ips = vec![FixedIpRequest::Address {
            subnet_id: c.subnet.clone(),
            ip_address: (*ip).into(),
        }];
        ids.push(net.create_port(&req).await.expect("node port").id);
    }
    ids
}

async fn port(c: &Cloud, id: &str) -> Port {
    c.session
        .network()
        .get_port(id)
        .await
        .expect("get port")
        .expect("port exists")
}

async fn service_sg(c: &Cloud, svc: &Service) -> Option<SecurityGroup> {
    let m = &svc.metadata;
    let name = format!(
        "lb-sg-{}-{}-{}",
        m.uid.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    );
    let mut found = c
        .session
        .network()
        .list_security_groups(&SecurityGroupFilter {
            name: Some(name),
            ..Default::default()
        })
        .await
        .expect("list SGs");
    assert!(found.len() <= 1, "one group per Service: {found:?}");
    found.pop()
}

/// The group's ingress rules as `proto port from prefix (ethertype)`, sorted.
fn ingress(sg: &SecurityGroup) -> Vec<String> {
    let mut r: Vec<String> = sg
        .security_group_rules
        .iter()
        .filter(|r| r.direction == "ingress")
        .map(|r| {
            assert_eq!(r.port_range_min, r.port_range_max, "{r:?}");
            format!(
                "{} {} from {} ({})",
                r.protocol.as_deref().unwrap_or("any"),
                r.port_range_min.unwrap_or_default(),
                r.remote_ip_prefix.as_deref().unwrap_or("any"),
                r.ethertype
            )
        })
        .collect();
    r.sort();
    r
}

fn sg_calls(log: &[LogEntry]) -> Vec<String> {
    log.iter()
        .filter(|e| {
            e.path.contains("security-group")
                || e.path.contains("/ports") && e.method != "GET"
                || e.path.contains("/tags")
        })
        .map(|e| format!("{} {}", e.method, e.operation))
        .collect()
}

/// The delete passes removed the Service's group, and it is gone.
async fn assert_group_deleted(c: &Cloud, svc: &Service, passes: &[Outcome]) {
    assert!(
        passes
            .iter()
            .flat_map(|o| &o.writes)
            .any(|w| w.starts_with("delete security group lb-sg-")),
        "{passes:#?}"
    );
    assert!(service_sg(c, svc).await.is_none());
}

#[tokio::test]
async fn manage_security_groups_opens_node_ports_on_member_ports_and_follows_changes() {
    let c = cloud().await;
    let lbs = c.controller("test", "manage-security-groups = true\n");
    let net = c.session.network();
    let ops = net
        .create_security_group(&SecurityGroupCreate {
            name: "ops".into(),
            ..Default::default()
        })
        .await
        .expect("ops SG");
    let ports = node_ports(&c, &["10.10.0.11", "10.10.0.12", "10.10.0.13"]).await;
    // Node 1's port carries the user's own group too: it must stay.
    net.update_port(
        &ports[0],
        &PortUpdate {
            security_groups: Some(vec![ops.id.clone()]),
            ..Default::default()
        },
    )
    .await
    .expect("ops on port 1");
    let before_port2 = port(&c, &ports[1]).await.security_groups;
    assert_eq!(before_port2.len(), 1, "the project's default group");

    let mut svc = service("web", &[("TCP", 80, 30080), ("UDP", 53, 30053)]);
    converge(&lbs, &mut svc, &nodes(2)).await;
    let sg = service_sg(&c, &svc).await.expect("the Service's group");
    assert_eq!(
        sg.description,
        "Security Group for default/web Service LoadBalancer in cluster test"
    );
    assert_eq!(
        ingress(&sg),
        [
            "tcp 30080 from 10.10.0.0/24 (IPv4)",
            "udp 30053 from 10.10.0.0/24 (IPv4)"
        ]
    );
    assert!(
        sg.security_group_rules
            .iter()
            .any(|r| r.direction == "egress"),
        "Neutron's egress rules are left alone"
    );
    let p1 = port(&c, &ports[0]).await;
    assert_eq!(p1.security_groups, [ops.id.clone(), sg.id.clone()]);
    assert!(p1.tags.contains(&sg.id), "tagged for the delete: {p1:?}");
    let p2 = port(&c, &ports[1]).await;
    assert_eq!(p2.security_groups, [before_port2[0].clone(), sg.id.clone()]);
    assert!(!port(&c, &ports[2]).await.security_groups.contains(&sg.id));

    // Nothing changed: not one write, and a bounded number of reads.
    let start = c.seq();
    let passes = converge(&lbs, &mut svc, &nodes(2)).await;
    assert_eq!(passes.len(), 1);
    assert!(passes[0].writes.is_empty(), "{:?}", passes[0].writes);
    let log = c.log_since(start);
    assert!(writes(&log).is_empty(), "{:?}", writes(&log));
    assert_eq!(count(&log, "GET", "/security-groups"), 1);
    assert_eq!(count(&log, "GET", "/ports"), 1);

    // A node port changes: one rule created, one deleted, the group kept.
    spec(&mut svc).ports = Some(ports_of(&[("TCP", 80, 30081), ("UDP", 53, 30053)]));
    let start = c.seq();
    converge(&lbs, &mut svc, &nodes(2)).await;
    let log = c.log_since(start);
    let sg_writes: Vec<String> = writes(&log)
        .into_iter()
        .filter(|w| w.contains("security-group"))
        .collect();
    assert_eq!(
        sg_writes,
        [
            "POST /network/v2.0/security-group-rules 201",
            "DELETE /network/v2.0/security-group-rules/{id} 204"
        ],
        "a diff, not a recreate"
    );
    let sg2 = service_sg(&c, &svc).await.expect("group");
    assert_eq!(sg2.id, sg.id);
    assert_eq!(
        ingress(&sg2),
        [
            "tcp 30081 from 10.10.0.0/24 (IPv4)",
            "udp 30053 from 10.10.0.0/24 (IPv4)"
        ]
    );

    // A third node gets the group; node 1 leaves and loses it (its own group stays).
    converge(&lbs, &mut svc, &nodes(3)).await;
    assert!(port(&c, &ports[2]).await.security_groups.contains(&sg.id));
    let later = [node("node-2", "10.10.0.12"), node("node-3", "10.10.0.13")];
    converge(&lbs, &mut svc, &later).await;
    let p1 = port(&c, &ports[0]).await;
    assert_eq!(p1.security_groups, vec![ops.id.clone()]);
    assert!(!p1.tags.contains(&sg.id), "{p1:?}");
    assert!(port(&c, &ports[1]).await.security_groups.contains(&sg.id));

    // ETP=Local: the health-check node port from the member subnet.
    spec(&mut svc).external_traffic_policy = Some("Local".into());
    spec(&mut svc).health_check_node_port = Some(32100);
    converge(&lbs, &mut svc, &later).await;
    assert!(
        ingress(&service_sg(&c, &svc).await.expect("group"))
            .contains(&"tcp 32100 from 10.10.0.0/24 (IPv4)".to_owned())
    );

    // Delete: off every port, then gone; the ports keep their other groups.
    let passes = delete(&lbs, &svc).await;
    assert_group_deleted(&c, &svc, &passes).await;
    for (p, want) in ports.iter().zip([
        vec![ops.id.clone()],
        before_port2.clone(),
        before_port2.clone(),
    ]) {
        let p = port(&c, p).await;
        assert_eq!(p.security_groups, want, "{p:?}");
        assert!(!p.tags.contains(&sg.id), "{p:?}");
    }
}

#[tokio::test]
async fn under_ovn_the_security_group_opens_node_ports_to_the_source_ranges() {
    let c = cloud().await;
    let lbs = c.controller("test", "lb-provider = ovn\nmanage-security-groups = true\n");
    let ports = node_ports(&c, &["10.10.0.11"]).await;
    let mut svc = service("ovn", &[("TCP", 80, 30080)]);
    spec(&mut svc).load_balancer_source_ranges =
        Some(vec!["203.0.113.0/24".into(), "2001:db8::/64".into()]);
    let passes = converge(&lbs, &mut svc, &nodes(1)).await;
    assert!(
        !passes.iter().any(|o| o.has_event(reasons::IGNORED)),
        "the ranges are enforced, not ignored: {:?}",
        all_events(&passes)
    );
    let sg = service_sg(&c, &svc).await.expect("group");
    assert_eq!(
        ingress(&sg),
        [
            "tcp 30080 from 2001:db8::/64 (IPv6)",
            "tcp 30080 from 203.0.113.0/24 (IPv4)"
        ]
    );
    assert!(port(&c, &ports[0]).await.security_groups.contains(&sg.id));

    // No ranges: OVN keeps the client address, so everyone of the Service's family.
    spec(&mut svc).load_balancer_source_ranges = None;
    converge(&lbs, &mut svc, &nodes(1)).await;
    assert_eq!(
        ingress(&service_sg(&c, &svc).await.expect("group")),
        ["tcp 30080 from 0.0.0.0/0 (IPv4)"]
    );
    delete(&lbs, &svc).await;
    assert!(service_sg(&c, &svc).await.is_none());
}

#[tokio::test]
async fn without_manage_security_groups_nothing_touches_groups_or_ports() {
    let c = cloud().await;
    let lbs = c.controller("test", "");
    let ports = node_ports(&c, &["10.10.0.11"]).await;
    let before = port(&c, &ports[0]).await;
    let start = c.seq();
    let mut svc = service("plain", &[("TCP", 80, 30080)]);
    spec(&mut svc).external_traffic_policy = Some("Local".into());
    spec(&mut svc).health_check_node_port = Some(32100);
    converge(&lbs, &mut svc, &nodes(1)).await;
    let log = c.log_since(start);
    assert!(sg_calls(&log).is_empty(), "{:?}", sg_calls(&log));
    // On delete, lookups of the group the Service would have had (none here), nothing else.
    let start = c.seq();
    delete(&lbs, &svc).await;
    let calls = sg_calls(&c.log_since(start));
    assert!(
        !calls.is_empty()
            && calls
                .iter()
                .all(|x| x == "GET GET /network/v2.0/security-groups"),
        "{calls:?}"
    );
    assert_eq!(port(&c, &ports[0]).await, before);
}

/// As upstream: turning `manage-security-groups` off does not strand the groups made while it was on.
#[tokio::test]
async fn a_group_made_while_managing_goes_with_its_service_after_managing_stopped() {
    let c = cloud().await;
    let ports = node_ports(&c, &["10.10.0.11"]).await;
    let before = port(&c, &ports[0]).await;
    let mut svc = service("was-managed", &[("TCP", 80, 30080)]);
    let managing = c.controller("test", "manage-security-groups = true\n");
    converge(&managing, &mut svc, &nodes(1)).await;
    let sg = service_sg(&c, &svc).await.expect("group");
    assert!(port(&c, &ports[0]).await.security_groups.contains(&sg.id));

    let plain = c.controller("test", "");
    let passes = delete(&plain, &svc).await;
    assert_group_deleted(&c, &svc, &passes).await;
    assert_eq!(
        port(&c, &ports[0]).await.security_groups,
        before.security_groups
    );
}

/// Passes that wait for a refresh in flight take its result, even when the listing took longer
/// than the snapshot's max age: one listing of each type for eight passes at once, not one per
/// pass (before, each waiter found the refresh it waited for too old and listed again: at
/// 1000 Services that was a refresh per pass, one after the other).
#[tokio::test]
async fn passes_waiting_for_a_slow_refresh_share_it() {
    let c = cloud().await;
    // Each call takes far longer than a snapshot may be old.
    c.sim.app().set_latency(kos_sim::LatencyModel {
        per_call_secs: 50.0, // 50 ms of real time on the fast clock
        ..c.sim.app().latency()
    });
    let lbs = c.controller_with(
        c.session.clone(),
        LbSettings {
            snapshot_max_age: Duration::from_millis(1),
            ..settings("test")
        },
        "",
    );
    let start = c.seq();
    let passes = (0..8).map(|_| lbs.snapshot());
    for o in futures::future::join_all(passes).await {
        o.expect("snapshot");
    }
    let log = c.log_since(start);
    let mut gets: Vec<&str> = log
        .iter()
        .filter(|e| e.method == "GET" && !e.path.starts_with("/identity"))
        .map(|e| e.operation.as_str())
        .collect();
    gets.sort_unstable();
    assert_eq!(gets.len(), 5, "one refresh for all eight: {gets:#?}");
    gets.dedup();
    assert_eq!(gets.len(), 5, "each type once: {gets:#?}");
}

/// A 503 with a Retry-After of `secs`, once, for `method` on paths matching `path`.
fn busy_once(method: &str, path: &str, secs: u64) -> FaultRule {
    FaultRule {
        id: None,
        method: Some(method.into()),
        path: path.into(),
        body: None,
        status: 503,
        probability: 1.0,
        count: Some(1),
        skip: 0,
        retry_after: Some(secs),
        after_side_effect: false,
        build_error: false,
        message: None,
    }
}

/// A refresh that started before a pass's own member PUT and ended after it is never that
/// pass's view, however long ago the PUT was: after a node join, the pass that follows the PUT
/// sees a snapshot holding it and lists no members. Before, a pass's write was forgotten once
/// older than the max age while such a refresh was still handed out (its age counts from its
/// end), so the pass saw its pool as before its own PUT and listed the members: 15–31 pools at
/// each node join of `kos bench ccm` at 1000 Services / 500 nodes, where a refresh is slower
/// than the max age.
#[tokio::test]
async fn a_refresh_that_spans_a_passs_own_member_put_is_not_its_view() {
    let c = cloud().await;
    let max_age = Duration::from_millis(300);
    let lbs = c.controller_with(
        c.session.clone(),
        LbSettings {
            snapshot_max_age: max_age,
            ..settings("test")
        },
        "",
    );
    let mut a = service("a", &[("TCP", 80, 30080)]);
    let mut b = service("b", &[("TCP", 80, 30180)]);
    converge(&lbs, &mut a, &nodes(2)).await;
    converge(&lbs, &mut b, &nodes(2)).await;
    let start = c.seq();
    let three = nodes(3);
    let faults = || c.sim.app().fault_engine();
    // a's member PUT is put off once: it lands 1–2 s after it was sent.
    faults()
        .add(busy_once("PUT", "/members$", 1))
        .expect("fault");
    lbs.snapshot().await.expect("snapshot");
    let a_pass = lbs.ensure_service(&a, &three);
    // Once that snapshot is too old, a refresh: it lists the load balancers and pools before
    // a's PUT lands, and ends 3–6 s later (its floating-IP list is put off once).
    let refresh = async {
        tokio::time::sleep(max_age + Duration::from_millis(200)).await;
        faults()
            .add(busy_once("GET", "/floatingips$", 3))
            .expect("fault");
        lbs.snapshot().await.expect("refresh")
    };
    let (o, _) = tokio::join!(a_pass, refresh);
    let o = o.expect("a's pass");
    assert_eq!(o.writes.len(), 1, "{o:#?}");
    apply(&mut a, &o);
    // The refresh just ended: b's pass takes it and writes; a's next pass follows at once.
    let o = lbs.ensure_service(&b, &three).await.expect("b's pass");
    assert_eq!(o.writes.len(), 1, "{o:#?}");
    apply(&mut b, &o);
    let o = lbs.ensure_service(&a, &three).await.expect("a's next pass");
    apply(&mut a, &o);
    converge(&lbs, &mut a, &three).await;
    converge(&lbs, &mut b, &three).await;
    let log = c.log_since(start);
    let (lists, puts) = member_calls(&log);
    assert_eq!(lists, 0, "no pool's members listed: {:?}", writes(&log));
    let landed: Vec<String> = writes(&log)
        .into_iter()
        .filter(|w| w.starts_with("PUT") && !w.ends_with(" 503"))
        .collect();
    assert_eq!(landed.len(), 2, "one member PUT per pool: {landed:?}");
    assert_eq!(puts.len(), 2, "{puts:?}");
    for pool in c.lbs().await.iter().flat_map(|l| l.pools.clone()) {
        assert_eq!(c.members(&pool.id).await.len(), 3);
    }
}

/// However long since a pool's members were last looked at, a node join is one member PUT per
/// pool and no member list: the pool's member ids are those last seen, so its members are the
/// ones cached (Octavia never changes a member's address or port), and a membership that needs
/// the batch replace needs it whatever else drifted. A pass that would change nothing still
/// lists an old entry's members, so drift the ids do not show is found.
#[tokio::test]
async fn a_node_join_past_the_verify_interval_lists_no_members() {
    let c = cloud().await;
    let verify = Duration::from_secs(1);
    let lbs = c.controller_with(
        c.session.clone(),
        LbSettings {
            // Far longer than a convergence takes here, far shorter than the pauses below.
            member_verify_interval: Some(verify),
            ..settings("test")
        },
        "",
    );
    let mut a = service("a", &[("TCP", 80, 30080), ("UDP", 53, 30053)]);
    converge(&lbs, &mut a, &nodes(2)).await;
    tokio::time::sleep(verify + Duration::from_millis(200)).await;

    let start = c.seq();
    converge(&lbs, &mut a, &nodes(3)).await;
    let log = c.log_since(start);
    let (lists, puts) = member_calls(&log);
    assert_eq!(lists, 0, "no pool's members listed");
    assert_eq!(puts.len(), 2, "every pool: {puts:?}");
    assert!(puts.values().all(|p| *p == 1), "{puts:?}");
    for pool in c.lbs().await.iter().flat_map(|l| l.pools.clone()) {
        assert_eq!(c.members(&pool.id).await.len(), 3);
    }

    // Nothing to change: an old entry is verified, one list per pool, and no write.
    tokio::time::sleep(verify + Duration::from_millis(200)).await;
    let start = c.seq();
    lbs.invalidate_snapshot();
    let o = lbs.ensure_service(&a, &nodes(3)).await.expect("resync");
    assert!(o.converged && o.writes.is_empty(), "{o:#?}");
    let log = c.log_since(start);
    assert_eq!(member_calls(&log).0, 2, "each pool verified");
    assert!(writes(&log).is_empty(), "{:?}", writes(&log));
}
