//! Builders shared by the unit tests of the load-balancer modules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_cloud::model::load_balancer::LbAlgorithm;

use super::annotations::{FloatingSubnet, MonitorOptions, ServiceOptions, VipChoice};
use super::nodes::{Backend, Backends};

/// Options as cloud.conf defaults give them (amphora, no monitors, no timeouts).
pub(crate) fn opts() -> ServiceOptions {
    ServiceOptions {
        internal: false,
        class: None,
        vip: VipChoice::Auto,
        member_subnet_id: None,
        floating_network_id: None,
        floating_subnet: FloatingSubnet::Any,
        connection_limit: -1,
        keep_floating_ip: false,
        proxy: None,
        x_forwarded_for: false,
        lb_method: LbAlgorithm::RoundRobin,
        timeouts: None,
        monitor: MonitorOptions {
            enabled: false,
            disabled_explicitly: false,
            delay: 5,
            timeout: 3,
            max_retries: 1,
            max_retries_down: 3,
        },
        flavor_id: None,
        availability_zone: None,
        tls_container_ref: None,
        load_balancer_id: None,
        hostname: None,
        node_selector: BTreeMap::new(),
        source_ranges: Vec::new(),
        load_balancer_ip: None,
        ipv6: false,
        ovn: false,
        notes: Vec::new(),
    }
}

/// A LoadBalancer Service `ns/web` with (protocol, port, nodePort) ports.
pub(crate) fn service(ports: &[(&str, i32, i32)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(proto, port, node_port)| ServicePort {
                        protocol: Some((*proto).into()),
                        port: *port,
                        node_port: Some(*node_port),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// [`service`] with `externalTrafficPolicy: Local` and this health-check node port, when given.
pub(crate) fn local_service(ports: &[(&str, i32, i32)], health_check: Option<i32>) -> Service {
    let mut svc = service(ports);
    if let Some(spec) = svc.spec.as_mut() {
        spec.external_traffic_policy = health_check.map(|_| "Local".into());
        spec.health_check_node_port = health_check;
    }
    svc
}

/// Nodes `n1`… at 10.0.0.11….
pub(crate) fn backends(n: usize) -> Backends {
    Backends {
        backends: (1..=n)
            .map(|i| Backend {
                name: format!("n{i}"),
                address: format!("10.0.0.{}", 10 + i),
            })
            .collect(),
        without_address: Vec::new(),
    }
}
