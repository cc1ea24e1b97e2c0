//! Shared fixtures: real user_data rendered by kos-bootstrap for a demo cluster, booted through the
//! guest on an in-memory host whose endpoint reaches the control planes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kos_bootstrap::{
    ApiEndpoint, Ccm, CloudConf, ClusterInput, ClusterSecrets, Cni, Csi, ManifestPin, NodeInput,
    PkiDelivery, Role, Taint, TaintEffect, render_user_data,
};
use kos_guest::testing::MemoryHost;
use kos_guest::{Boot, Guest, Image, Logged, Metadata, ServerEvent, ServerId};
use rand::SeedableRng;
use rand::rngs::StdRng;
use secrecy::SecretString;
use time::OffsetDateTime;

pub const ENDPOINT: &str = "203.0.113.10:6443";
/// calico v3.32.1's manifest and the sha256 of the bytes its URL serves (research/cni-pins.md).
pub const CALICO_URL: &str =
    "https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml";
pub const CALICO_SHA256: &str = "a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744";

/// 2026-01-01T00:00:00Z, the renderer's fixture time.
pub fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap()
}

pub fn secrets_with_ttl(ttl: Duration) -> ClusterSecrets {
    ClusterSecrets::generate(&mut StdRng::seed_from_u64(0x6b6f73), t0(), ttl).unwrap()
}

pub fn secrets() -> ClusterSecrets {
    secrets_with_ttl(kos_bootstrap::DEFAULT_TOKEN_TTL)
}

pub fn cluster(version: &str, control_planes: u32, workers: u32) -> ClusterInput {
    ClusterInput {
        name: "demo".into(),
        kubernetes_version: version.parse().unwrap(),
        endpoint: ApiEndpoint {
            host: "203.0.113.10".into(),
            port: 6443,
        },
        cert_sans: vec!["203.0.113.10".into()],
        pod_cidr: "10.244.0.0/16".parse().unwrap(),
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        cni: Cni::Calico,
        cni_manifest: Some(ManifestPin {
            url: CALICO_URL.into(),
            sha256: CALICO_SHA256.into(),
        }),
        ccm: Ccm::Upstream,
        csi: Csi::Cinder,
        cloud: CloudConf {
            auth_url: "https://keystone.example.com:5000/v3".into(),
            region: "RegionOne".into(),
            application_credential_id: "0b8f1c0e6a4d4f2b9e3c7a1d5f6e8b90".into(),
            application_credential_secret: SecretString::from("CANARY-app-cred-secret"),
            floating_network_id: "6f1a7c7e-0b1e-4a55-9f53-2d1f0c3b9a11".into(),
            subnet_id: "c2d9e1f4-3a5b-4c6d-8e7f-9a0b1c2d3e4f".into(),
            lb_provider: None,
            ca_cert: None,
            csi_volume_zone: None,
        },
        pki_delivery: PkiDelivery::AllControlPlanes,
        expected_nodes: control_planes + workers,
        server_tls_bootstrap: false,
        encryption: None,
        airgap: Default::default(),
    }
}

pub fn node(role: Role) -> NodeInput {
    match role {
        Role::Worker => NodeInput {
            role,
            pool: "workers".into(),
            labels: BTreeMap::from([("tier".into(), "general".into())]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("batch".into()),
                effect: TaintEffect::PreferNoSchedule,
            }],
        },
        _ => NodeInput {
            role,
            pool: "control-plane".into(),
            labels: BTreeMap::new(),
            taints: vec![],
        },
    }
}

/// The payload Nova hands the guest (gzip or text), as kos renders it.
pub fn user_data(c: &ClusterInput, role: Role, s: &ClusterSecrets) -> Vec<u8> {
    render_user_data(c, &node(role), s)
        .unwrap()
        .payload()
        .to_vec()
}

/// The cloud-config text before compression, for tests that edit it.
pub fn user_data_text(c: &ClusterInput, role: Role, s: &ClusterSecrets) -> String {
    render_user_data(c, &node(role), s)
        .unwrap()
        .text
        .expose()
        .to_string()
}

/// A host, a guest and the servers booted so far.
pub struct World {
    pub host: MemoryHost,
    pub guest: Guest,
    /// Control planes behind the endpoint, in the order the load balancer tries them.
    pub control_planes: Vec<ServerId>,
    /// Servers booted so far: the next one's address is 10.0.0.(10 + this).
    pub booted: u8,
}

impl World {
    pub fn new() -> World {
        World {
            host: MemoryHost::new(t0()),
            guest: Guest::new(),
            control_planes: Vec::new(),
            booted: 0,
        }
    }

    /// Boots a server named `name` (hostname `kos-demo-<name>`, instance id `id-<name>-<n>`).
    pub fn boot(&mut self, name: &str, control_plane: bool, user_data: Vec<u8>) -> ServerId {
        let n = self.guest.log().len();
        let id = ServerId(format!("id-{name}-{n}"));
        if control_plane {
            self.control_planes.push(id.clone());
            self.route();
        }
        // One address per server (the log's length can repeat: a boot may log nothing).
        let address = std::net::IpAddr::from([10, 0, 0, 10 + self.booted]);
        self.booted += 1;
        // A server reaches its own address (its API server's advertise address).
        self.host.route(&format!("{address}:6443"), &[&id]);
        let boot = Boot {
            metadata: Metadata {
                instance_id: id.0.clone(),
                local_hostname: format!("kos-demo-{name}"),
                availability_zone: "nova".into(),
                region: "RegionOne".into(),
            },
            user_data: Some(user_data),
            image: Image::ubuntu(),
            addresses: vec![address],
            config_drive: true,
        };
        self.guest
            .handle(&id, ServerEvent::Boot(Box::new(boot)), &self.host)
            .unwrap();
        id
    }

    pub fn route(&self) {
        let cps: Vec<&ServerId> = self.control_planes.iter().collect();
        self.host.route(ENDPOINT, &cps);
    }

    pub fn event(&mut self, id: &ServerId, e: ServerEvent) {
        self.guest.handle(id, e, &self.host).unwrap();
    }

    /// Runs until nothing is due, at most `hours` of simulated time.
    pub fn settle_hours(&mut self, hours: i64) {
        self.host
            .settle(&mut self.guest, time::Duration::hours(hours))
            .unwrap();
    }

    pub fn advance(&mut self, d: time::Duration) {
        self.host.advance(d);
        self.guest.tick(&self.host).unwrap();
    }

    pub fn markers(&self, id: &ServerId) -> Vec<String> {
        self.guest
            .markers(id)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The root causes logged for a server's failed steps.
    pub fn failure_details(&self, id: &ServerId) -> Vec<String> {
        self.guest
            .log_of(id)
            .filter_map(|l| match l {
                Logged::StepFailed { detail, .. } => detail.clone(),
                _ => None,
            })
            .collect()
    }

    pub fn only_cluster(&self) -> &kos_guest::Cluster {
        let all: Vec<_> = self.guest.clusters().collect();
        assert_eq!(all.len(), 1, "{all:?}");
        all[0]
    }
}

/// The markers of a step list, all ok.
pub fn ok(steps: &[&str]) -> Vec<String> {
    steps
        .iter()
        .map(|s| format!("kos-bootstrap: {s} ok"))
        .collect()
}

/// The steps of kos's bootstrap script, read off crates/kos-bootstrap/src/scripts/bootstrap.sh by a
/// person (not by the guest's parser): common steps, then the role's.
pub const COMMON: &[&str] = &[
    "preflight",
    "packages",
    "kernel",
    "containerd",
    "metadata-block",
];
pub const INIT: &[&str] = &[
    "kubeadm-init",
    "cni",
    "addons",
    "metadata-close",
    "bootstrap",
];
pub const JOIN: &[&str] = &["api-wait", "kubeadm-join", "metadata-close", "bootstrap"];

pub fn init_markers() -> Vec<String> {
    ok(&[COMMON, INIT].concat())
}

pub fn join_markers() -> Vec<String> {
    ok(&[COMMON, JOIN].concat())
}

/// The marker of a join that failed all its attempts (its reason: kubeadm's own error).
pub fn assert_join_failed(w: &World, id: &ServerId) {
    let last = w.markers(id).last().cloned().unwrap_or_default();
    let prefix = "kos-bootstrap: kubeadm-join failed: kubeadm join failed after 8 attempts: ";
    assert!(last.starts_with(prefix), "{last}");
    assert!(!last.contains("To see the stack trace"), "{last}");
}
