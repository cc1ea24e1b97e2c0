//! kos-ccm's Service load-balancer core ([`kos_ccm::lb::LoadBalancers`]) driven the way its
//! Kubernetes wiring drives it (apply the outcome's annotations and status, requeue after the given
//! delay, until converged), against the target's real Octavia and Neutron. Nodes are k8s `Node`
//! objects whose InternalIPs are fixed IPs of ports on the scenario's subnet, so members point at
//! real addresses. Another cluster's Service of the same namespace and name lives next to ours and
//! must come through every step untouched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::CloudConfig;
use kos_ccm::lb::annotations::LOAD_BALANCER_ID;
use kos_ccm::lb::{EventType, LbSettings, LoadBalancers, Outcome, reasons};
use kos_cloud::model::load_balancer::{
    LoadBalancer, LoadBalancerFilter, MonitorType, Protocol, ProvisioningStatus,
};
use kos_cloud::model::network::{FloatingIp, FloatingIpFilter, PortCreate, RouterCreate};
use kos_cloud::{RetryPolicy, ServiceKind, Session};
use tokio::time::Instant;

use super::network_with_subnet;
use crate::{Cleanup, Ctx, Made, WAIT};

const NAMESPACE: &str = "default";
const SERVICE: &str = "web";
const HEALTH_CHECK_PORT: i32 = 32100;
const SOURCE_RANGES: [&str; 2] = ["192.0.2.0/24", "198.51.100.0/24"];

/// What a kos-ccm scenario runs on: nodes whose InternalIPs are fixed IPs of ports on a subnet
/// behind a router to the external network, cloud.conf naming both, and the CCM's session.
struct Bench {
    nodes: Vec<Node>,
    config: Arc<CloudConfig>,
    session: Session,
}

impl Bench {
    /// `clusters` are registered for cleanup, their leftovers deleted before the network goes.
    /// `lb_conf` is added to cloud.conf's `[LoadBalancer]`.
    async fn new(
        ctx: &Ctx,
        made: &mut Cleanup,
        what: &str,
        cidr: &str,
        clusters: &[&str],
        lb_conf: &str,
    ) -> Result<Bench> {
        let net = ctx.session.network();
        let run = &ctx.run;
        let ext = ctx.external_network().await?;
        let sub = network_with_subnet(ctx, made, what, cidr).await?;
        let router = net
            .create_router(&RouterCreate {
                tags: run.tags(),
                ..RouterCreate::with_gateway(run.name(&format!("{what}-router")), &ext.id)
            })
            .await?;
        made.push(Made::Router(router.id.clone()));
        net.add_router_interface(&router.id, &sub.id).await?;
        made.push(Made::RouterInterface {
            router: router.id.clone(),
            subnet: sub.id.clone(),
        });
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let port = net
                .create_port(&PortCreate {
                    tags: run.tags(),
                    ..PortCreate::new(&sub.network_id, run.name(&format!("{what}-node-{i}")))
                })
                .await?;
            made.push(Made::Port(port.id.clone()));
            let ip = port
                .fixed_ips
                .first()
                .with_context(|| format!("port {} has no fixed IP", port.id))?
                .ip_address
                .clone();
            nodes.push(node(&format!("node-{i}"), &ip));
        }
        // Deleted before the network (cleanup runs newest first), whatever a pass left behind.
        for c in clusters {
            made.push(Made::CcmCluster((*c).to_owned()));
        }
        let config = Arc::new(
            CloudConfig::parse(
                "cloud.conf",
                &format!(
                    "[Global]\nuse-clouds = true\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {}\n{lb_conf}",
                    sub.id, ext.id
                ),
            )?
            .config,
        );
        // As kos-ccm runs: on the application credential kos makes for it (its roles, an expiry,
        // its access rules if the context has them), and Octavia's busy 409 comes back to the
        // controller, which requeues. The checks look as the user, so that every call made with
        // the credential is kos-ccm's.
        let session = super::identity::ccm_session(ctx, made)
            .await?
            .with_retry_policy(RetryPolicy {
                retry_busy_load_balancer: false,
                ..ctx.session.retry_policy().clone()
            });
        Ok(Bench {
            nodes,
            config,
            session,
        })
    }

    fn ccm(&self, ctx: &Ctx, cluster: &str) -> LoadBalancers {
        LoadBalancers::new(
            self.session.clone(),
            self.config.clone(),
            LbSettings {
                pending_requeue: ctx.every,
                retry_requeue: ctx.every * 4,
                snapshot_max_age: Duration::from_secs(2),
                ..LbSettings::new(cluster)
            },
        )
    }
}

pub async fn ccm_load_balancer(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let net = ctx.session.network();
        let run = &ctx.run;
        // Neither name is a prefix of the other, so "from cluster <name>" matches one cluster only.
        let (ours, theirs) = (run.cluster("lbours"), run.cluster("lbtheirs"));
        let bench = Bench::new(ctx, made, "ccmnet", "10.248.0.0/24", &[&theirs, &ours], "").await?;
        let (nodes, session) = (&bench.nodes, &bench.session);
        let (lbs, other) = (bench.ccm(ctx, &ours), bench.ccm(ctx, &theirs));

        // 1. Both clusters' Services at once: same namespace and name, different cluster names.
        let mut svc = service(&[(80, 30080), (443, 30443)]);
        let mut their_svc = service(&[(80, 31080)]);
        let (mine, their) = tokio::join!(
            converge(ctx, &lbs, &mut svc, &nodes[..2]),
            converge(ctx, &other, &mut their_svc, &nodes[..1]),
        );
        mine.context("our Service")?;
        their.context("the other cluster's Service")?;
        let theirs_before = shape(&ctx.session, &lb_of(&ctx.session, &their_svc).await?).await?;

        let lb = lb_of(&ctx.session, &svc).await?;
        let name = format!("kube_service_{ours}_{NAMESPACE}_{SERVICE}");
        ensure!(lb.name == name, "LB name {:?}, want {name:?}", lb.name);
        ensure!(
            lb.provisioning_status == ProvisioningStatus::Active,
            "LB {}",
            lb.provisioning_status
        );
        for tag in [name.clone(), format!("kos-ccm-cluster={ours}")] {
            ensure!(lb.tags.contains(&tag), "LB tags {:?} lack {tag:?}", lb.tags);
        }
        let same_name = ctx
            .session
            .load_balancer()
            .list_load_balancers(&LoadBalancerFilter {
                name: Some(name.clone()),
                ..Default::default()
            })
            .await?;
        ensure!(same_name.len() == 1, "{} LBs named {name}", same_name.len());
        expect_ports(&ctx.session, &lb, &[(80, 30080), (443, 30443)], &nodes[..2]).await?;
        let fip = fip_on_vip(&ctx.session, &lb).await?;
        ensure!(
            ingress_ip(&svc).as_deref() == Some(fip.floating_ip_address.as_str()),
            "status ingress {:?}, FIP {}",
            ingress_ip(&svc),
            fip.floating_ip_address
        );
        ensure!(
            fip.description
                .ends_with(&format!("{NAMESPACE}/{SERVICE} from cluster {ours}")),
            "FIP description {:?}",
            fip.description
        );

        // 2. A port added, one removed: the listener of the port that stays is kept as it is.
        let before = shape(&ctx.session, &lb).await?;
        set_ports(&mut svc, &[(80, 30080), (8443, 30843)]);
        converge(ctx, &lbs, &mut svc, &nodes[..2]).await?;
        let after = expect_ports(
            &ctx.session,
            &lb,
            &[(80, 30080), (8443, 30843)],
            &nodes[..2],
        )
        .await?;
        ensure!(
            before.listeners.get(&80) == after.listeners.get(&80),
            "the port-80 listener or pool was replaced: {:?} -> {:?}",
            before.listeners.get(&80),
            after.listeners.get(&80)
        );
        if let Some((_, pool)) = before.listeners.get(&443) {
            ensure!(
                ctx.session.load_balancer().get_pool(pool).await?.is_none(),
                "the removed port's pool {pool} is still there"
            );
        }

        // 3. A node joins: one batch member replace per pool, nothing piecemeal.
        let calls = session.counters();
        converge(ctx, &lbs, &mut svc, nodes).await?;
        let calls = session.counters().since(&calls);
        let replaces = calls.operation(ServiceKind::LoadBalancer, "member.replace");
        let piecemeal = calls.operation(ServiceKind::LoadBalancer, "member.create")
            + calls.operation(ServiceKind::LoadBalancer, "member.delete");
        ensure!(
            replaces == 2 && piecemeal == 0,
            "node join: {replaces} member replaces and {piecemeal} single-member calls for 2 pools"
        );
        expect_ports(&ctx.session, &lb, &[(80, 30080), (8443, 30843)], nodes).await?;

        // 4. externalTrafficPolicy Local: an HTTP monitor on the health-check node port.
        let spec = svc.spec.get_or_insert_with(ServiceSpec::default);
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(HEALTH_CHECK_PORT);
        // create-monitor is off: the forced monitor is announced with a Warning.
        converge_warned(ctx, &lbs, &mut svc, nodes, &[reasons::MONITOR_FORCED]).await?;
        let lbapi = ctx.session.load_balancer();
        for (port, (_, pool_id)) in &shape(&ctx.session, &lb).await?.listeners {
            let pool = lbapi
                .get_pool(pool_id)
                .await?
                .with_context(|| format!("pool {pool_id}"))?;
            let hm_id = pool
                .healthmonitor_id
                .with_context(|| format!("port {port}: no health monitor"))?;
            let hm = lbapi
                .get_health_monitor(&hm_id)
                .await?
                .with_context(|| format!("monitor {hm_id}"))?;
            ensure!(
                hm.kind == MonitorType::Http && hm.url_path.as_deref() == Some("/healthz"),
                "port {port}: monitor {:?} {:?}",
                hm.kind,
                hm.url_path
            );
            for m in lbapi.list_members(pool_id).await? {
                ensure!(
                    m.monitor_port == Some(HEALTH_CHECK_PORT as u16),
                    "port {port}: member {} checked on {:?}",
                    m.address,
                    m.monitor_port
                );
            }
        }

        // 5. Deleted: our LB and our FIP go; the other cluster's are as they were.
        delete(ctx, &lbs, &svc).await?;
        ctx.poll("our LB to go", || async {
            Ok(lbapi
                .get_load_balancer(&lb.id)
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        let left = net
            .list_floating_ips(&FloatingIpFilter {
                floating_ip_address: Some(fip.floating_ip_address.clone()),
                ..Default::default()
            })
            .await?;
        ensure!(left.is_empty(), "our FIP survived the delete: {left:?}");
        let theirs_lb = lb_of(&ctx.session, &their_svc).await?;
        ensure!(
            theirs_lb.provisioning_status == ProvisioningStatus::Active,
            "the other cluster's LB is {}",
            theirs_lb.provisioning_status
        );
        let theirs_after = shape(&ctx.session, &theirs_lb).await?;
        ensure!(
            theirs_before == theirs_after,
            "the other cluster's LB changed: {theirs_before:?} -> {theirs_after:?}"
        );
        fip_on_vip(&ctx.session, &theirs_lb)
            .await
            .context("the other cluster's FIP")?;
        Ok(())
    })
    .await
}

/// What a Service's owner changes on a running load balancer, on kos's own cloud.conf
/// (`manage-security-groups = true`): the floating subnet chosen by name, the source ranges, the
/// algorithm, the node port, a health monitor turned on, tuned and off, the load balancer disabled behind
/// kos-ccm's back, the Service made internal (its kept floating IP detached), and deleted.
pub async fn ccm_load_balancer_changes(ctx: &Ctx) -> Result<()> {
    use kos_ccm::lb::annotations::{
        ENABLE_HEALTH_MONITOR, FLOATING_SUBNET, HEALTH_MONITOR_DELAY, INTERNAL, KEEP_FLOATING_IP,
        LB_METHOD,
    };
    ctx.guarded(async |made| {
        let cluster = ctx.run.cluster("lbchange");
        let bench = Bench::new(
            ctx,
            made,
            "chgnet",
            "10.247.0.0/24",
            &[&cluster],
            "manage-security-groups = true\n",
        )
        .await?;
        let lbs = bench.ccm(ctx, &cluster);
        let nodes = &bench.nodes[..2];
        let mut svc = service(&[(80, 30080)]);
        let annotate = |svc: &mut Service, k: &str, v: &str| {
            svc.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(k.to_owned(), v.to_owned());
        };
        annotate(&mut svc, FLOATING_SUBNET, "*");
        annotate(&mut svc, KEEP_FLOATING_IP, "true");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        let lb = lb_of(&ctx.session, &svc).await?;
        let fip = fip_on_vip(&ctx.session, &lb).await?;

        svc.spec
            .get_or_insert_with(ServiceSpec::default)
            .load_balancer_source_ranges = Some(vec!["203.0.113.0/24".into()]);
        annotate(&mut svc, LB_METHOD, "LEAST_CONNECTIONS");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        let s = shape(&ctx.session, &lb).await?;
        let (_, pool) = s.listeners.get(&80).context("no port-80 listener")?;
        let pool = ctx
            .session
            .load_balancer()
            .get_pool(pool)
            .await?
            .context("the pool is gone")?;
        ensure!(
            pool.lb_algorithm.as_str() == "LEAST_CONNECTIONS",
            "algorithm {}",
            pool.lb_algorithm.as_str()
        );
        ensure!(
            s.allowed_cidrs.get(&80) == Some(&vec!["203.0.113.0/24".to_owned()]),
            "allowed CIDRs {:?}",
            s.allowed_cidrs
        );

        // Another node port: the members' security group opens it instead of the old one.
        set_ports(&mut svc, &[(80, 30081)]);
        converge(ctx, &lbs, &mut svc, nodes).await?;

        annotate(&mut svc, ENABLE_HEALTH_MONITOR, "true");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        annotate(&mut svc, HEALTH_MONITOR_DELAY, "7");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        annotate(&mut svc, ENABLE_HEALTH_MONITOR, "false");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        ensure!(
            ctx.session
                .load_balancer()
                .get_pool(&pool.id)
                .await?
                .context("the pool is gone")?
                .healthmonitor_id
                .is_none(),
            "the health monitor is still there"
        );

        // Disabled by someone else: kos-ccm enables it again.
        ctx.session
            .load_balancer()
            .update_load_balancer(
                &lb.id,
                &kos_cloud::model::load_balancer::LoadBalancerUpdate {
                    admin_state_up: Some(false),
                    ..Default::default()
                },
            )
            .await?;
        ctx.poll("the disabled LB to be ACTIVE", || async {
            Ok(
                (lb_of(&ctx.session, &svc).await?.provisioning_status
                    == ProvisioningStatus::Active)
                    .then_some(()),
            )
        })
        .await?;
        // (Once its snapshot of the project's load balancers is older than snapshot_max_age.)
        let end = Instant::now() + WAIT;
        loop {
            converge(ctx, &lbs, &mut svc, nodes).await?;
            if lb_of(&ctx.session, &svc).await?.admin_state_up {
                break;
            }
            ensure!(Instant::now() < end, "the LB stays disabled");
            tokio::time::sleep(ctx.every).await;
        }

        // Internal: the floating IP is kept, detached.
        annotate(&mut svc, INTERNAL, "true");
        converge(ctx, &lbs, &mut svc, nodes).await?;
        let kept = ctx
            .session
            .network()
            .list_floating_ips(&FloatingIpFilter {
                floating_ip_address: Some(fip.floating_ip_address.clone()),
                ..Default::default()
            })
            .await?;
        ensure!(
            kept.len() == 1 && kept[0].port_id.is_none(),
            "the kept floating IP: {kept:?}"
        );
        delete(ctx, &lbs, &svc).await?;
        Ok(())
    })
    .await
}

fn service(ports: &[(i32, i32)]) -> Service {
    let mut svc = Service {
        metadata: ObjectMeta {
            name: Some(SERVICE.into()),
            namespace: Some(NAMESPACE.into()),
            uid: Some(format!(
                "00000000-0000-4000-8000-{:012x}",
                rand::random::<u32>()
            )),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            load_balancer_source_ranges: Some(SOURCE_RANGES.map(String::from).to_vec()),
            ..Default::default()
        }),
        status: Some(ServiceStatus::default()),
    };
    set_ports(&mut svc, ports);
    svc
}

fn set_ports(svc: &mut Service, ports: &[(i32, i32)]) {
    svc.spec.get_or_insert_with(ServiceSpec::default).ports = Some(
        ports
            .iter()
            .map(|(port, node_port)| ServicePort {
                name: Some(format!("p{port}")),
                protocol: Some("TCP".into()),
                port: *port,
                node_port: Some(*node_port),
                ..Default::default()
            })
            .collect(),
    );
}

fn node(name: &str, ip: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }]),
            ..Default::default()
        }),
    }
}

fn node_ip(n: &Node) -> Option<&str> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .first()
        .map(|a| a.address.as_str())
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

/// A Warning event means the user would have to act: here, a failure (never a retry until WAIT),
/// unless the step expects it.
fn no_warning(o: &Outcome, expected: &[&str]) -> Result<()> {
    if let Some(w) = o
        .events
        .iter()
        .find(|e| e.type_ == EventType::Warning && !expected.contains(&e.reason))
    {
        bail!("Warning {}: {}", w.reason, w.note);
    }
    Ok(())
}

async fn converge(ctx: &Ctx, lbs: &LoadBalancers, svc: &mut Service, nodes: &[Node]) -> Result<()> {
    converge_warned(ctx, lbs, svc, nodes, &[]).await
}

/// Passes until converged; a Warning other than `expected` fails.
async fn converge_warned(
    ctx: &Ctx,
    lbs: &LoadBalancers,
    svc: &mut Service,
    nodes: &[Node],
    expected: &[&str],
) -> Result<()> {
    let end = Instant::now() + WAIT;
    loop {
        let o = lbs.ensure_service(svc, nodes).await?;
        apply(svc, &o);
        no_warning(&o, expected)?;
        if o.converged {
            return Ok(());
        }
        let after = o
            .requeue_after
            .with_context(|| format!("neither converged nor requeued: {o:?}"))?;
        if Instant::now() >= end {
            bail!("not converged after {WAIT:?}: {o:?}");
        }
        tokio::time::sleep(after.max(ctx.every)).await;
    }
}

async fn delete(ctx: &Ctx, lbs: &LoadBalancers, svc: &Service) -> Result<()> {
    let end = Instant::now() + WAIT;
    loop {
        let o = lbs.ensure_service_deleted(svc).await?;
        no_warning(&o, &[])?;
        if o.converged {
            return Ok(());
        }
        let after = o
            .requeue_after
            .with_context(|| format!("delete neither converged nor requeued: {o:?}"))?;
        if Instant::now() >= end {
            bail!("not deleted after {WAIT:?}: {o:?}");
        }
        tokio::time::sleep(after.max(ctx.every)).await;
    }
}

fn ingress_ip(svc: &Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// The LB the Service's annotation names.
async fn lb_of(session: &Session, svc: &Service) -> Result<LoadBalancer> {
    let id = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LOAD_BALANCER_ID))
        .context("no load-balancer-id annotation")?;
    session
        .load_balancer()
        .get_load_balancer(id)
        .await?
        .with_context(|| format!("LB {id} is gone"))
}

/// Exactly one floating IP on the LB's VIP port.
async fn fip_on_vip(session: &Session, lb: &LoadBalancer) -> Result<FloatingIp> {
    let port = lb.vip_port_id.clone().context("LB without a VIP port")?;
    let mut fips = session
        .network()
        .list_floating_ips(&FloatingIpFilter {
            port_id: Some(port),
            ..Default::default()
        })
        .await?;
    ensure!(fips.len() == 1, "FIPs on the VIP: {fips:?}");
    Ok(fips.remove(0))
}

/// An LB's listeners by port (listener id, pool id) and each pool's members (address, port).
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    listeners: BTreeMap<u16, (String, String)>,
    members: BTreeMap<u16, Vec<(String, u16)>>,
    allowed_cidrs: BTreeMap<u16, Vec<String>>,
}

async fn shape(session: &Session, lb: &LoadBalancer) -> Result<Shape> {
    let api = session.load_balancer();
    let mut s = Shape {
        listeners: BTreeMap::new(),
        members: BTreeMap::new(),
        allowed_cidrs: BTreeMap::new(),
    };
    for l in api.list_listeners(&lb.id).await? {
        ensure!(
            l.protocol == Protocol::Tcp,
            "listener {}: {:?}",
            l.name,
            l.protocol
        );
        let pool = l
            .default_pool_id
            .clone()
            .with_context(|| format!("listener {} has no pool", l.name))?;
        let mut members: Vec<(String, u16)> = api
            .list_members(&pool)
            .await?
            .into_iter()
            .map(|m| (m.address, m.protocol_port))
            .collect();
        members.sort();
        let mut cidrs = l.allowed_cidrs.clone();
        cidrs.sort();
        s.members.insert(l.protocol_port, members);
        s.allowed_cidrs.insert(l.protocol_port, cidrs);
        ensure!(
            s.listeners.insert(l.protocol_port, (l.id, pool)).is_none(),
            "two listeners on port {}",
            l.protocol_port
        );
    }
    Ok(s)
}

/// One TCP listener and pool per Service port, the nodes as members on its node port, the source
/// ranges as allowed CIDRs.
async fn expect_ports(
    session: &Session,
    lb: &LoadBalancer,
    ports: &[(i32, i32)],
    nodes: &[Node],
) -> Result<Shape> {
    let s = shape(session, lb).await?;
    let want: Vec<u16> = ports.iter().map(|(p, _)| *p as u16).collect();
    let have: Vec<u16> = s.listeners.keys().copied().collect();
    ensure!(have == want, "listener ports {have:?}, want {want:?}");
    let mut cidrs = SOURCE_RANGES.map(String::from).to_vec();
    cidrs.sort();
    for (port, node_port) in ports {
        let mut want: Vec<(String, u16)> = nodes
            .iter()
            .filter_map(node_ip)
            .map(|ip| (ip.to_owned(), *node_port as u16))
            .collect();
        want.sort();
        let port = *port as u16;
        ensure!(
            s.members.get(&port) == Some(&want),
            "port {port}: members {:?}, want {want:?}",
            s.members.get(&port)
        );
        ensure!(
            s.allowed_cidrs.get(&port) == Some(&cidrs),
            "port {port}: allowed CIDRs {:?}, want {cidrs:?}",
            s.allowed_cidrs.get(&port)
        );
    }
    Ok(s)
}
