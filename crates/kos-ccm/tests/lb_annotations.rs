//! The catalogue of bad Service annotations (and spec fields): each one is rejected with a message
//! naming the annotation, the bad value and the fix; all problems of a Service come back at once;
//! good values come back typed, with cloud.conf defaults and classes applied.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::CloudConfig;
use kos_ccm::lb::annotations::{
    self as a, FloatingSubnet, ProxyProtocol, ServiceOptions, VipChoice, parse,
};
use kos_cloud::model::load_balancer::LbAlgorithm;

const AUTH: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nregion = r1\nusername = u\npassword = p\ntenant-name = t\n";
const UUID: &str = "6a4b1c2d-1111-2222-3333-444455556666";
const UUID2: &str = "7b4b1c2d-1111-2222-3333-444455556666";

fn config(extra: &str) -> CloudConfig {
    CloudConfig::parse("cloud.conf", &format!("{AUTH}{extra}"))
        .expect("config")
        .config
}

fn svc(ann: &[(&str, &str)]) -> Service {
    svc_with(ann, |_| {})
}

fn svc_with(ann: &[(&str, &str)], f: impl FnOnce(&mut ServiceSpec)) -> Service {
    let mut spec = ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![ServicePort {
            port: 80,
            protocol: Some("TCP".into()),
            node_port: Some(30080),
            ..Default::default()
        }]),
        ..Default::default()
    };
    f(&mut spec);
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            annotations: Some(
                ann.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    }
}

fn ok(s: &Service, cfg: &CloudConfig) -> ServiceOptions {
    match parse(s, cfg) {
        Ok(o) => o,
        Err(p) => panic!("rejected: {p:#?}"),
    }
}

/// The one problem of a Service, as text.
fn problem(s: &Service, cfg: &CloudConfig) -> String {
    match parse(s, cfg) {
        Ok(_) => panic!("accepted {:?}", s.metadata.annotations),
        Err(p) => {
            assert_eq!(p.len(), 1, "{p:#?}");
            p[0].to_string()
        }
    }
}

#[test]
fn each_bad_value_gets_its_own_message() {
    let cfg = config("");
    let catalogue: &[(&str, &str, &str)] = &[
        (
            a::INTERNAL,
            "True",
            "is not a boolean: write \"true\" or \"false\"",
        ),
        (a::KEEP_FLOATING_IP, "yes", "is not a boolean"),
        (a::X_FORWARDED_FOR, "1", "is not a boolean"),
        (a::ENABLE_HEALTH_MONITOR, "on", "is not a boolean"),
        (
            a::CONNECTION_LIMIT,
            "many",
            "is not a whole number: write a number of connections",
        ),
        (
            a::CONNECTION_LIMIT,
            "-5",
            "is out of range: write a whole number of connections (-1 for no limit) from -1",
        ),
        (
            a::TIMEOUT_CLIENT_DATA,
            "5s",
            "is not a whole number: write a number of milliseconds, e.g. \"50000\"",
        ),
        (
            a::TIMEOUT_MEMBER_CONNECT,
            "99999999999",
            "is out of range: write a whole number of milliseconds from 0 to 31536000",
        ),
        (a::TIMEOUT_MEMBER_DATA, "-1", "is out of range"),
        (a::TIMEOUT_TCP_INSPECT, "1.5", "is not a whole number"),
        (
            a::HEALTH_MONITOR_DELAY,
            "0",
            "is out of range: write a whole number of seconds from 1",
        ),
        (
            a::HEALTH_MONITOR_MAX_RETRIES,
            "11",
            "is out of range: write a whole number of checks from 1 to 10",
        ),
        (
            a::HEALTH_MONITOR_MAX_RETRIES_DOWN,
            "0",
            "is out of range: write a whole number of checks from 1 to 10",
        ),
        (
            a::HEALTH_MONITOR_TIMEOUT,
            "10",
            "is longer than the health monitor delay (5 s): Octavia needs timeout ≤ delay",
        ),
        (
            a::PROXY_PROTOCOL,
            "v3",
            "is not a PROXY protocol setting: write \"true\" or \"v1\" (version 1), \"v2\"",
        ),
        (
            a::LB_METHOD,
            "round_robin",
            "is not an Octavia algorithm: use one of ROUND_ROBIN, LEAST_CONNECTIONS, SOURCE_IP, \
             SOURCE_IP_PORT",
        ),
        (
            a::FLOATING_NETWORK_ID,
            "public",
            "is not an OpenStack ID: give the external network's UUID",
        ),
        (
            a::FLOATING_SUBNET_ID,
            "public-subnet",
            "is not an OpenStack ID: give the subnet's UUID",
        ),
        (
            a::SUBNET_ID,
            "nodes",
            "is not an OpenStack ID: give the subnet's UUID",
        ),
        (
            a::NETWORK_ID,
            "net-1",
            "is not an OpenStack ID: give the network's UUID",
        ),
        (
            a::MEMBER_SUBNET_ID,
            "x",
            "is not an OpenStack ID: give the subnet's UUID",
        ),
        (
            a::PORT_ID,
            "vip-port",
            "is not an OpenStack ID: give the Neutron port's UUID",
        ),
        (
            a::FLAVOR_ID,
            "small",
            "is not an OpenStack ID: give the Octavia flavor's UUID",
        ),
        (
            a::LOAD_BALANCER_ID,
            "my-lb",
            "is not an OpenStack ID: give the Octavia load balancer's UUID",
        ),
        (a::FLOATING_SUBNET, "~public-(", "is not a valid pattern"),
        (
            a::FLOATING_SUBNET_TAGS,
            "a,,b",
            "has an empty tag: write tags separated by commas",
        ),
        (
            a::CLASS,
            "gold",
            "is not a known class: cloud.conf defines no [LoadBalancerClass \"name\"] section",
        ),
        (
            a::DEFAULT_TLS_CONTAINER_REF,
            "my-cert",
            "is not a Barbican reference: write the container or secret URL",
        ),
        (
            a::HOSTNAME,
            "LB_Example.com",
            "is not a DNS name: write lower-case labels",
        ),
        (
            a::NODE_SELECTOR,
            "pool=web,=x",
            "has \"=x\", which is not a label selector term",
        ),
        (
            a::SOURCE_RANGES,
            "10.0.0.0/8,everyone",
            "is not a CIDR: write address/prefix",
        ),
    ];
    for (key, value, want) in catalogue {
        let got = problem(&svc(&[(key, value)]), &cfg);
        assert!(
            got.starts_with(&format!("{key}: ")),
            "{key}={value}: message does not name the annotation: {got}"
        );
        assert!(
            got.contains(&format!("{value:?}")) || value.is_empty() || *key == a::SOURCE_RANGES,
            "{key}={value}: message does not show the value: {got}"
        );
        assert!(
            got.contains(want),
            "{key}={value}:\n got: {got}\nwant: …{want}…"
        );
    }
}

#[test]
fn spec_fields_and_combinations_are_checked_too() {
    let cfg = config("");
    let p = problem(
        &svc_with(&[], |s| s.load_balancer_ip = Some("1.2.3".into())),
        &cfg,
    );
    assert!(
        p.starts_with("spec.loadBalancerIP: \"1.2.3\" is not an IP address"),
        "{p}"
    );
    let p = problem(
        &svc_with(&[], |s| {
            s.load_balancer_source_ranges = Some(vec!["10.0.0.0/33".into()]);
        }),
        &cfg,
    );
    assert!(
        p.starts_with("spec.loadBalancerSourceRanges: \"10.0.0.0/33\" is not a CIDR"),
        "{p}"
    );
    let p = problem(&svc_with(&[], |s| s.ports = Some(vec![])), &cfg);
    assert!(p.starts_with("spec.ports"), "{p}");
    let p = problem(
        &svc(&[(a::PROXY_PROTOCOL, "true"), (a::X_FORWARDED_FOR, "true")]),
        &cfg,
    );
    assert!(
        p.contains("cannot be combined with loadbalancer.openstack.org/x-forwarded-for"),
        "{p}"
    );
    let udp = |s: &mut ServiceSpec| {
        s.ports = Some(vec![ServicePort {
            port: 53,
            protocol: Some("UDP".into()),
            node_port: Some(30053),
            ..Default::default()
        }]);
    };
    let p = problem(
        &svc_with(
            &[(
                a::DEFAULT_TLS_CONTAINER_REF,
                "https://kms.example/v1/containers/6a4b1c2d-1111-2222-3333-444455556666",
            )],
            udp,
        ),
        &cfg,
    );
    assert!(
        p.starts_with("spec.ports[0].protocol: \"UDP\" cannot be served by a TERMINATED_HTTPS"),
        "{p}"
    );
    let p = problem(&svc_with(&[(a::PROXY_PROTOCOL, "v2")], udp), &cfg);
    assert!(p.contains("cannot carry the PROXY protocol"), "{p}");
}

#[test]
fn all_problems_come_back_at_once() {
    let cfg = config("");
    let s = svc(&[
        (a::INTERNAL, "yes"),
        (a::TIMEOUT_CLIENT_DATA, "5s"),
        (a::LB_METHOD, "FASTEST"),
        (a::PORT_ID, "nope"),
    ]);
    let p = parse(&s, &cfg).expect_err("rejected");
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        vec![
            a::INTERNAL,
            a::PORT_ID,
            a::LB_METHOD,
            a::TIMEOUT_CLIENT_DATA
        ]
    );
}

#[test]
fn ovn_rejects_what_it_cannot_do_and_ignores_what_it_need_not() {
    let cfg = config("[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\n");
    let p = problem(&svc(&[(a::X_FORWARDED_FOR, "true")]), &cfg);
    assert!(p.contains("is not supported by the OVN provider"), "{p}");
    let p = problem(&svc(&[(a::LB_METHOD, "ROUND_ROBIN")]), &cfg);
    assert!(p.contains("use SOURCE_IP_PORT"), "{p}");
    let o = ok(&svc(&[(a::TIMEOUT_CLIENT_DATA, "1000")]), &cfg);
    assert!(o.timeouts.is_none());
    assert!(
        o.notes[0].to_string().contains("no listener timeouts"),
        "{:?}",
        o.notes
    );
}

#[test]
fn typos_of_known_annotations_are_pointed_out_without_blocking() {
    let cfg = config("");
    let o = ok(
        &svc(&[("loadbalancer.openstack.org/keep-floating-ip", "true")]),
        &cfg,
    );
    assert!(!o.keep_floating_ip);
    assert!(
        o.notes[0]
            .to_string()
            .contains("did you mean loadbalancer.openstack.org/keep-floatingip?"),
        "{:?}",
        o.notes
    );
}

#[test]
fn good_values_are_typed_with_defaults_and_classes() {
    let cfg = config(&format!(
        "[LoadBalancer]\nsubnet-id = {UUID}\nfloating-network-id = {UUID}\ncreate-monitor = true\n\
         monitor-delay = 7s\nnode-selector = role=worker\n\
         [LoadBalancerClass \"gold\"]\nfloating-network-id = {UUID2}\nfloating-subnet = public-*\n\
         member-subnet-id = {UUID2}\n"
    ));
    let o = ok(&svc(&[]), &cfg);
    assert_eq!(o.vip, VipChoice::Subnet(UUID.into()));
    assert_eq!(o.floating_network_id.as_deref(), Some(UUID));
    assert!(o.monitor.enabled);
    assert_eq!(o.monitor.delay, 7);
    assert_eq!(o.connection_limit, -1);
    assert_eq!(o.lb_method, LbAlgorithm::RoundRobin);
    let t = o.timeouts.expect("timeouts");
    assert_eq!(
        (
            t.timeout_client_data,
            t.timeout_member_connect,
            t.timeout_tcp_inspect
        ),
        (Some(50_000), Some(5_000), Some(0))
    );
    assert_eq!(
        o.node_selector.get("role").map(String::as_str),
        Some("worker")
    );

    let o = ok(
        &svc_with(
            &[
                (a::CLASS, "gold"),
                (a::FLOATING_NETWORK_ID, UUID),
                (a::PROXY_PROTOCOL, "v2"),
                (a::LB_METHOD, "SOURCE_IP"),
                (a::ENABLE_HEALTH_MONITOR, "false"),
                (a::NODE_SELECTOR, "pool=web, gpu"),
                (a::SOURCE_RANGES, "10.0.0.0/8, 192.168.1.7/24"),
            ],
            |s| s.load_balancer_ip = Some("172.24.4.10".into()),
        ),
        &cfg,
    );
    // The class wins over the annotation for the floating network (upstream order).
    assert_eq!(o.floating_network_id.as_deref(), Some(UUID2));
    assert!(
        matches!(&o.floating_subnet, FloatingSubnet::Matching { name: Some(p), .. } if p.matches("public-a") && !p.matches("private"))
    );
    assert_eq!(o.member_subnet_id.as_deref(), Some(UUID2));
    assert_eq!(o.proxy, Some(ProxyProtocol::V2));
    assert_eq!(o.lb_method, LbAlgorithm::SourceIp);
    assert!(!o.monitor.enabled && o.monitor.disabled_explicitly);
    assert_eq!(o.node_selector.len(), 2);
    assert_eq!(
        o.source_ranges
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["10.0.0.0/8", "192.168.1.0/24"]
    );
    assert_eq!(
        o.load_balancer_ip.map(|i| i.to_string()).as_deref(),
        Some("172.24.4.10")
    );
}

#[test]
fn internal_lb_in_config_wins_and_says_so() {
    let cfg = config("[LoadBalancer]\ninternal-lb = true\n");
    let o = ok(&svc(&[(a::INTERNAL, "false")]), &cfg);
    assert!(o.internal);
    assert!(o.notes[0].to_string().contains("internal-lb = true"));
    let o = ok(
        &svc_with(&[], |s| s.ip_families = Some(vec!["IPv6".into()])),
        &config(""),
    );
    assert!(o.internal && o.ipv6, "IPv6 VIPs never get a floating IP");
}

#[test]
fn everyone_in_source_ranges_means_no_restriction() {
    let o = ok(
        &svc_with(&[], |s| {
            s.load_balancer_source_ranges = Some(vec!["0.0.0.0/0".into()]);
        }),
        &config(""),
    );
    assert!(o.source_ranges.is_empty());
}
