//! What a Service's load balancer should look like: one listener, pool, member set and (optionally)
//! health monitor per Service port, built from the Service, its [`ServiceOptions`] and the
//! [`Backends`]. Pure; the requests Octavia takes are built from it here too, so a fully-populated
//! create and a later piecemeal repair ask for exactly the same objects.
//!
//! Protocol choices mirror the upstream (`getListenerProtocol`, `buildPoolCreateOpt`,
//! `buildMonitorCreateOpts`): a TLS reference makes the listener TERMINATED_HTTPS, X-Forwarded-For
//! makes it HTTP, and both make the pool HTTP; PROXY makes the pool PROXY/PROXYV2; the monitor is
//! TCP, UDP-CONNECT or SCTP after the port, or HTTP `GET /healthz` on the health-check node port for
//! `externalTrafficPolicy: Local`.

use std::collections::BTreeMap;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kos_cloud::model::load_balancer::{
    HealthMonitorCreate, LbAlgorithm, ListenerCreate, ListenerTimeouts, MemberSpec, MonitorType,
    PoolCreate, PoolParent, Protocol, SessionPersistence,
};

use super::annotations::{ProxyProtocol, ServiceOptions};
use super::naming;
use super::nodes::Backends;

/// The header Octavia inserts for X-Forwarded-For.
pub const XFF_HEADER: &str = "X-Forwarded-For";
/// The kube-proxy health check path for `externalTrafficPolicy: Local`.
pub const HEALTHZ: &str = "/healthz";

/// Listeners are matched by protocol and port, as the upstream does (`listenerKey`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListenerKey {
    pub protocol: Protocol,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredListener {
    pub name: String,
    pub key: ListenerKey,
    pub connection_limit: i64,
    pub x_forwarded_for: bool,
    pub tls_container_ref: Option<String>,
    pub timeouts: Option<ListenerTimeouts>,
    /// Empty: everyone.
    pub allowed_cidrs: Vec<IpNet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPool {
    pub name: String,
    pub protocol: Protocol,
    pub lb_algorithm: LbAlgorithm,
    /// `sessionAffinity: ClientIP`.
    pub source_ip_persistence: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DesiredMember {
    /// The node name (upstream names members after their node).
    pub name: String,
    pub address: String,
    pub port: u16,
    /// The health-check node port with an HTTP monitor; `None` checks the member port.
    pub monitor_port: Option<u16>,
    pub subnet_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredMonitor {
    pub name: String,
    pub kind: MonitorType,
    pub delay: u32,
    pub timeout: u32,
    pub max_retries: u32,
    pub max_retries_down: u32,
}

impl DesiredMonitor {
    pub fn is_http(&self) -> bool {
        self.kind == MonitorType::Http
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPort {
    pub index: usize,
    pub listener: DesiredListener,
    pub pool: DesiredPool,
    pub members: Vec<DesiredMember>,
    pub monitor: Option<DesiredMonitor>,
}

/// Why the monitor is what it is, when that differs from what the user asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorOverride {
    /// ETP=Local with monitors off (by config or annotation): forced on (upstream #2866).
    ForcedForLocalTraffic { by_annotation: bool },
    /// ETP=Local on OVN: no HTTP monitors there, so a plain one on the member port.
    NoHttpOnOvn,
}

/// The Service's whole desired load-balancer configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub lb_name: String,
    pub ports: Vec<DesiredPort>,
    pub monitor_override: Option<MonitorOverride>,
}

/// The health-check node port when `externalTrafficPolicy: Local` has one.
pub fn health_check_node_port(svc: &Service) -> Option<u16> {
    let spec = svc.spec.as_ref()?;
    if spec.external_traffic_policy.as_deref() != Some("Local") {
        return None;
    }
    spec.health_check_node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
}

/// Builds the desired ports. `member_subnet` is where members live (`None`: Octavia's default,
/// the VIP subnet).
pub fn desired(
    svc: &Service,
    opts: &ServiceOptions,
    backends: &Backends,
    lb_name: &str,
    member_subnet: Option<&str>,
) -> Desired {
    let spec = svc.spec.clone().unwrap_or_default();
    let hc_port = health_check_node_port(svc);
    let http_monitor = hc_port.is_some() && !opts.ovn;
    let monitor_on = opts.monitor.enabled || hc_port.is_some();
    let monitor_override = match (hc_port, opts.monitor.enabled, opts.ovn) {
        (Some(_), false, _) => Some(MonitorOverride::ForcedForLocalTraffic {
            by_annotation: opts.monitor.disabled_explicitly,
        }),
        (Some(_), true, true) => Some(MonitorOverride::NoHttpOnOvn),
        _ => None,
    };
    let affinity = spec.session_affinity.as_deref() == Some("ClientIP");
    let mut ports = Vec::new();
    for (index, p) in spec.ports.as_deref().unwrap_or_default().iter().enumerate() {
        let base = Protocol::from(p.protocol.as_deref().unwrap_or("TCP"));
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let listener_protocol = if opts.tls_container_ref.is_some() {
            Protocol::TerminatedHttps
        } else if opts.x_forwarded_for {
            Protocol::Http
        } else {
            base.clone()
        };
        let pool_protocol = match opts.proxy {
            Some(ProxyProtocol::V1) => Protocol::Proxy,
            Some(ProxyProtocol::V2) => Protocol::ProxyV2,
            None if opts.tls_container_ref.is_some() || opts.x_forwarded_for => Protocol::Http,
            None => base.clone(),
        };
        let monitor = monitor_on.then(|| DesiredMonitor {
            name: naming::monitor_name(index, lb_name),
            kind: if http_monitor {
                MonitorType::Http
            } else {
                match base {
                    Protocol::Udp => MonitorType::UdpConnect,
                    Protocol::Sctp => MonitorType::Sctp,
                    _ => MonitorType::Tcp,
                }
            },
            delay: opts.monitor.delay,
            timeout: opts.monitor.timeout,
            max_retries: opts.monitor.max_retries,
            max_retries_down: opts.monitor.max_retries_down,
        });
        // NodePort 0: allocateLoadBalancerNodePorts=false, nothing to send traffic to.
        let node_port = p.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0);
        let members = if node_port == 0 {
            Vec::new()
        } else {
            backends
                .backends
                .iter()
                .map(|b| DesiredMember {
                    name: b.name.clone(),
                    address: b.address.clone(),
                    port: node_port,
                    monitor_port: if http_monitor && monitor_on {
                        hc_port
                    } else {
                        None
                    },
                    subnet_id: member_subnet.map(str::to_owned),
                })
                .collect()
        };
        ports.push(DesiredPort {
            index,
            listener: DesiredListener {
                name: naming::listener_name(index, lb_name),
                key: ListenerKey {
                    protocol: listener_protocol,
                    port,
                },
                connection_limit: opts.connection_limit,
                x_forwarded_for: opts.x_forwarded_for,
                tls_container_ref: opts.tls_container_ref.clone(),
                timeouts: opts.timeouts,
                allowed_cidrs: opts.source_ranges.clone(),
            },
            pool: DesiredPool {
                name: naming::pool_name(index, lb_name),
                protocol: pool_protocol,
                lb_algorithm: opts.lb_method.clone(),
                source_ip_persistence: affinity,
            },
            members,
            monitor,
        });
    }
    Desired {
        lb_name: lb_name.to_owned(),
        ports,
        monitor_override,
    }
}

impl DesiredListener {
    pub fn insert_headers(&self) -> BTreeMap<String, String> {
        if self.x_forwarded_for {
            BTreeMap::from([(XFF_HEADER.to_owned(), "true".to_owned())])
        } else {
            BTreeMap::new()
        }
    }

    pub fn allowed_cidr_strings(&self) -> Vec<String> {
        self.allowed_cidrs.iter().map(ToString::to_string).collect()
    }

    /// The create request; `lb_id` empty inside a fully-populated create. Tagged with the
    /// Service's LB name so a shared load balancer's listeners are told apart (upstream).
    pub fn create(&self, lb_id: &str, service_tag: &str) -> ListenerCreate {
        ListenerCreate {
            connection_limit: Some(self.connection_limit),
            allowed_cidrs: self.allowed_cidr_strings(),
            timeouts: self.timeouts.unwrap_or_default(),
            insert_headers: self.insert_headers(),
            default_tls_container_ref: self.tls_container_ref.clone(),
            tags: vec![service_tag.to_owned()],
            ..ListenerCreate::new(lb_id, &self.name, self.key.protocol.clone(), self.key.port)
        }
    }
}

impl DesiredPool {
    pub fn session_persistence(&self) -> Option<SessionPersistence> {
        self.source_ip_persistence.then(|| SessionPersistence {
            kind: "SOURCE_IP".into(),
            cookie_name: None,
        })
    }

    pub fn create(&self, parent: PoolParent) -> PoolCreate {
        let mut p = PoolCreate::new(
            parent,
            &self.name,
            self.protocol.clone(),
            self.lb_algorithm.clone(),
        );
        p.session_persistence = self.session_persistence();
        p
    }
}

impl DesiredMember {
    /// Weight and admin state are sent explicitly so a member changed behind our back is put
    /// back by the batch update. A monitor port that must go is overwritten with the member port
    /// (the same target), because the batch update cannot unset a field.
    pub fn spec(&self) -> MemberSpec {
        MemberSpec {
            name: self.name.clone(),
            subnet_id: self.subnet_id.clone(),
            weight: Some(1),
            admin_state_up: Some(true),
            monitor_port: Some(self.monitor_port.unwrap_or(self.port)),
            ..MemberSpec::new(&self.address, self.port)
        }
    }
}

impl DesiredMonitor {
    pub fn create(&self, pool_id: &str) -> HealthMonitorCreate {
        let http = self.is_http();
        HealthMonitorCreate {
            name: self.name.clone(),
            max_retries_down: Some(self.max_retries_down),
            url_path: http.then(|| HEALTHZ.to_owned()),
            http_method: http.then(|| "GET".to_owned()),
            expected_codes: http.then(|| "200".to_owned()),
            ..HealthMonitorCreate::new(
                pool_id,
                self.kind.clone(),
                self.delay,
                self.timeout,
                self.max_retries,
            )
        }
    }
}

impl DesiredPort {
    /// The listener with its default pool, members and monitor, for a fully-populated create.
    pub fn populated_listener(&self, service_tag: &str) -> ListenerCreate {
        let mut pool = self.pool.create(PoolParent::Inline);
        pool.members = self.members.iter().map(DesiredMember::spec).collect();
        pool.healthmonitor = self.monitor.as_ref().map(|m| m.create(""));
        let mut l = self.listener.create("", service_tag);
        l.default_pool = Some(pool);
        l
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::lb::nodes::Backend;
    use crate::lb::testutil::{local_service, opts};

    fn svc(ports: &[(&str, i32, i32)], etp_local: Option<i32>) -> Service {
        local_service(ports, etp_local)
    }

    fn backends() -> Backends {
        Backends {
            backends: vec![Backend {
                name: "n1".into(),
                address: "10.0.0.5".into(),
            }],
            without_address: Vec::new(),
        }
    }

    #[test]
    fn one_listener_pool_and_member_set_per_port() {
        let d = desired(
            &svc(&[("TCP", 80, 30080), ("UDP", 53, 30053)], None),
            &opts(),
            &backends(),
            "kube_service_c_ns_s",
            Some("sub"),
        );
        assert_eq!(d.ports.len(), 2);
        assert_eq!(d.ports[1].listener.key.protocol, Protocol::Udp);
        assert_eq!(d.ports[1].pool.protocol, Protocol::Udp);
        assert_eq!(d.ports[1].listener.name, "listener_1_kube_service_c_ns_s");
        assert_eq!(d.ports[0].members[0].port, 30080);
        assert_eq!(d.ports[0].members[0].subnet_id.as_deref(), Some("sub"));
        assert!(d.ports[0].monitor.is_none());
    }

    #[test]
    fn local_traffic_policy_forces_an_http_monitor_on_the_health_check_port() {
        // Regression for upstream #2866: ETP=Local without a monitor blackholes traffic.
        let d = desired(
            &svc(&[("TCP", 80, 30080)], Some(32000)),
            &opts(),
            &backends(),
            "lb",
            None,
        );
        let m = d.ports[0].monitor.as_ref().expect("monitor");
        assert_eq!(m.kind, MonitorType::Http);
        let req = m.create("p");
        assert_eq!(req.url_path.as_deref(), Some("/healthz"));
        assert_eq!(d.ports[0].members[0].monitor_port, Some(32000));
        assert_eq!(
            d.monitor_override,
            Some(MonitorOverride::ForcedForLocalTraffic {
                by_annotation: false
            })
        );
    }

    #[test]
    fn tls_xff_and_proxy_pick_the_upstream_protocols() {
        let mut o = opts();
        o.x_forwarded_for = true;
        let d = desired(
            &svc(&[("TCP", 80, 30080)], None),
            &o,
            &backends(),
            "lb",
            None,
        );
        assert_eq!(d.ports[0].listener.key.protocol, Protocol::Http);
        assert_eq!(d.ports[0].pool.protocol, Protocol::Http);
        assert_eq!(
            d.ports[0]
                .listener
                .insert_headers()
                .get(XFF_HEADER)
                .map(String::as_str),
            Some("true")
        );
        let mut o = opts();
        o.tls_container_ref = Some("https://kms/v1/secrets/x".into());
        let d = desired(
            &svc(&[("TCP", 443, 30443)], None),
            &o,
            &backends(),
            "lb",
            None,
        );
        assert_eq!(d.ports[0].listener.key.protocol, Protocol::TerminatedHttps);
        assert_eq!(d.ports[0].pool.protocol, Protocol::Http);
        let mut o = opts();
        o.proxy = Some(ProxyProtocol::V2);
        let d = desired(
            &svc(&[("TCP", 80, 30080)], None),
            &o,
            &backends(),
            "lb",
            None,
        );
        assert_eq!(d.ports[0].listener.key.protocol, Protocol::Tcp);
        assert_eq!(d.ports[0].pool.protocol, Protocol::ProxyV2);
    }

    #[test]
    fn no_node_ports_means_no_members() {
        let d = desired(
            &svc(&[("TCP", 80, 0)], None),
            &opts(),
            &backends(),
            "lb",
            None,
        );
        assert!(d.ports[0].members.is_empty());
    }
}
