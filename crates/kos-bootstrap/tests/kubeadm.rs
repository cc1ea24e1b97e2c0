//! The kubeadm documents parse back into our strict types and carry every field the bootstrap relies on.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use kos_bootstrap::kubeadm::{Arg, Documents, KubeTaint, NodeRegistration};
use kos_bootstrap::*;

fn arg<'a>(args: &'a [Arg], name: &str) -> Option<&'a str> {
    args.iter()
        .find(|a| a.name == name)
        .map(|a| a.value.as_str())
}

fn check_registration(r: &NodeRegistration, role: Role) {
    assert_eq!(r.name, "{{ v1.local_hostname }}");
    assert_eq!(r.cri_socket, "unix:///run/containerd/containerd.sock");
    let args = &r.kubelet_extra_args;
    assert_eq!(arg(args, "cloud-provider"), Some("external"));
    assert_eq!(
        arg(args, "provider-id"),
        Some("openstack:///{{ v1.instance_id }}")
    );
    let cp_taint = KubeTaint {
        key: "node-role.kubernetes.io/control-plane".into(),
        value: None,
        effect: "NoSchedule".into(),
    };
    if role == Role::Worker {
        assert_eq!(
            arg(args, "node-labels"),
            Some("kos/pool=workers,tier=general")
        );
        assert_eq!(
            r.taints,
            vec![KubeTaint {
                key: "dedicated".into(),
                value: Some("batch".into()),
                effect: "PreferNoSchedule".into()
            }]
        );
    } else {
        assert_eq!(arg(args, "node-labels"), Some("kos/pool=control-plane"));
        assert_eq!(r.taints, vec![cp_taint]);
    }
}

fn check(version: &str, api_version: &str, delivery: PkiDelivery) {
    let s = secrets();
    let mut c = cluster(version, 3, 2);
    c.pki_delivery = delivery;
    for role in [Role::InitControlPlane, Role::JoinControlPlane, Role::Worker] {
        let yaml = render_kubeadm(&c, &node(role), &s).unwrap();
        let docs = Documents::parse(yaml.expose()).unwrap();
        match (role, docs) {
            (
                Role::InitControlPlane,
                Documents::Init {
                    init,
                    cluster,
                    kubelet,
                },
            ) => {
                assert_eq!(
                    (init.api_version.as_str(), init.kind.as_str()),
                    (api_version, "InitConfiguration")
                );
                let t = &init.bootstrap_tokens[0];
                assert_eq!(t.token, s.token.value());
                assert_eq!(t.ttl, "2h");
                assert_eq!(t.usages, ["signing", "authentication"]);
                assert_eq!(
                    t.groups,
                    ["system:bootstrappers:kubeadm:default-node-token"]
                );
                assert_eq!(init.certificate_key, s.certificate_key);
                check_registration(&init.node_registration, role);
                assert_eq!(cluster.api_version, api_version);
                assert_eq!(cluster.cluster_name, "demo");
                assert_eq!(cluster.kubernetes_version, format!("v{version}"));
                assert_eq!(cluster.control_plane_endpoint, "203.0.113.10:6443");
                assert_eq!(cluster.certificates_dir, "/etc/kubernetes/pki");
                assert_eq!(cluster.networking.pod_subnet, "10.244.0.0/16");
                assert_eq!(cluster.networking.service_subnet, "10.96.0.0/12");
                assert_eq!(
                    cluster.api_server.cert_sans,
                    ["203.0.113.10", "10.0.0.5", "api.demo.example.com"]
                );
                assert_eq!(
                    arg(&cluster.controller_manager.extra_args, "cloud-provider"),
                    Some("external")
                );
                assert_eq!(kubelet.cgroup_driver, "systemd");
                assert!(!kubelet.server_tls_bootstrap);
            }
            (Role::JoinControlPlane | Role::Worker, Documents::Join(join)) => {
                assert_eq!(
                    (join.api_version.as_str(), join.kind.as_str()),
                    (api_version, "JoinConfiguration")
                );
                let d = &join.discovery.bootstrap_token;
                assert_eq!(d.api_server_endpoint, "203.0.113.10:6443");
                assert_eq!(d.token, s.token.value());
                assert_eq!(d.ca_cert_hashes, [s.discovery_hash().unwrap()]);
                match role {
                    Role::JoinControlPlane => {
                        let cp = join.control_plane.unwrap();
                        let want = (delivery == PkiDelivery::UploadCerts)
                            .then(|| s.certificate_key.clone());
                        assert_eq!(cp.certificate_key, want);
                    }
                    _ => assert!(join.control_plane.is_none()),
                }
                check_registration(&join.node_registration, role);
            }
            (role, docs) => panic!("{role:?} rendered {docs:?}"),
        }
    }
}

#[test]
fn v1beta4_documents_carry_every_field() {
    check(
        "1.36.4",
        "kubeadm.k8s.io/v1beta4",
        PkiDelivery::AllControlPlanes,
    );
    check("1.34.0", "kubeadm.k8s.io/v1beta4", PkiDelivery::UploadCerts);
}

#[test]
fn the_types_are_strict() {
    let s = secrets();
    let v4 = render_kubeadm(&cluster("1.36.4", 1, 0), &node(Role::Worker), &s).unwrap();
    // v1beta3's map-form arguments are refused.
    let v3 = v4.expose().replace(
        "  kubeletExtraArgs:\n  - name: cloud-provider\n    value: external\n",
        "  kubeletExtraArgs:\n    cloud-provider: external\n",
    );
    assert_ne!(&v3, v4.expose());
    assert!(Documents::parse(&v3).is_err());
    // An unknown field is refused.
    let extra = v4.expose().replace(
        "kind: JoinConfiguration\n",
        "kind: JoinConfiguration\ndryRun: true\n",
    );
    assert!(Documents::parse(&extra).is_err());
}

#[test]
fn invalid_nodes_are_refused_before_rendering() {
    let s = secrets();
    let c = cluster("1.36.4", 1, 0);
    let mut n = node(Role::Worker);
    n.labels
        .insert("node-role.kubernetes.io/worker".into(), "".into());
    let e = render_kubeadm(&c, &n, &s).unwrap_err().to_string();
    assert!(e.contains("NodeRestriction"), "{e}");
    let mut n = node(Role::Worker);
    n.labels
        .insert("node.kubernetes.io/pool-size".into(), "large".into());
    render_kubeadm(&c, &n, &s).unwrap();
    let mut n = node(Role::Worker);
    n.taints[0].key = "bad key".into();
    assert!(render_kubeadm(&c, &n, &s).is_err());
    let mut bad = cluster("1.36.4", 1, 0);
    bad.service_cidr = "10.244.128.0/20".parse().unwrap();
    assert!(
        render_kubeadm(&bad, &node(Role::Worker), &s)
            .unwrap_err()
            .to_string()
            .contains("overlap")
    );
}
