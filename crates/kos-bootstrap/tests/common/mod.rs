//! Shared fixtures: a fixed clock, a seeded RNG, a cluster whose application-credential secret is a
//! canary, and redaction of every secret by value.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kos_bootstrap::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use secrecy::SecretString;
use time::OffsetDateTime;

pub const CANARY: &str = "CANARY-5f2e9c1d-7b4a-app-cred-secret";

/// 2026-01-01T00:00:00Z.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap()
}

pub fn rng() -> StdRng {
    StdRng::seed_from_u64(0x6b6f73)
}

pub fn secrets() -> ClusterSecrets {
    ClusterSecrets::generate(&mut rng(), now(), DEFAULT_TOKEN_TTL).unwrap()
}

pub fn cluster(version: &str, control_planes: u32, workers: u32) -> ClusterInput {
    ClusterInput {
        name: "demo".into(),
        kubernetes_version: version.parse().unwrap(),
        endpoint: ApiEndpoint {
            host: "203.0.113.10".into(),
            port: 6443,
        },
        cert_sans: vec![
            "203.0.113.10".into(),
            "10.0.0.5".into(),
            "api.demo.example.com".into(),
        ],
        pod_cidr: "10.244.0.0/16".parse().unwrap(),
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        cni: Cni::Calico,
        cni_manifest: None,
        ccm: Ccm::Upstream,
        csi: Csi::Cinder,
        cloud: CloudConf {
            auth_url: "https://keystone.example.com:5000/v3".into(),
            region: "RegionOne".into(),
            application_credential_id: "0b8f1c0e6a4d4f2b9e3c7a1d5f6e8b90".into(),
            application_credential_secret: SecretString::from(CANARY),
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

/// Every value that must never reach a snapshot, with its placeholder. Certificates and public keys are
/// not secret, but change with every generation, so they are replaced too (as `<PUBLIC:..>`).
pub fn redactions(s: &ClusterSecrets) -> Vec<(String, String)> {
    let mut v = vec![
        (
            s.ca.key_pem.expose().to_string(),
            "<SECRET:ca.key>".to_string(),
        ),
        (
            s.etcd_ca.key_pem.expose().to_string(),
            "<SECRET:etcd-ca.key>".into(),
        ),
        (
            s.front_proxy_ca.key_pem.expose().to_string(),
            "<SECRET:front-proxy-ca.key>".into(),
        ),
        (
            s.service_account.private_pem.expose().to_string(),
            "<SECRET:sa.key>".into(),
        ),
        (
            s.token.value().expose().to_string(),
            "<SECRET:token>".into(),
        ),
        (
            s.token.secret.expose().to_string(),
            "<SECRET:token-secret>".into(),
        ),
        (
            s.certificate_key.expose().to_string(),
            "<SECRET:certificate-key>".into(),
        ),
        (CANARY.to_string(), "<SECRET:app-cred>".into()),
        (s.ca.cert_pem.clone(), "<PUBLIC:ca.crt>".into()),
        (s.etcd_ca.cert_pem.clone(), "<PUBLIC:etcd-ca.crt>".into()),
        (
            s.front_proxy_ca.cert_pem.clone(),
            "<PUBLIC:front-proxy-ca.crt>".into(),
        ),
        (
            s.service_account.public_pem.clone(),
            "<PUBLIC:sa.pub>".into(),
        ),
        (s.discovery_hash().unwrap(), "<PUBLIC:ca-hash>".into()),
    ];
    // PEMs also appear indented inside cloud-config block scalars.
    let indented: Vec<_> = v
        .iter()
        .filter(|(value, _)| value.contains('\n'))
        .map(|(value, p)| (value.trim_end().replace('\n', "\n    "), p.clone()))
        .collect();
    v.extend(indented);
    v.sort_by_key(|b| std::cmp::Reverse(b.0.len()));
    v
}

/// Replaces every secret by value; returns the text and how many secrets were replaced.
pub fn redact(text: &str, s: &ClusterSecrets) -> (String, usize) {
    let mut out = text.to_string();
    let mut secrets = 0;
    for (value, placeholder) in redactions(s) {
        let n = out.matches(value.as_str()).count();
        if placeholder.starts_with("<SECRET:") {
            secrets += n;
        }
        out = out.replace(value.as_str(), &placeholder);
    }
    assert!(!out.contains(CANARY));
    (out, secrets)
}

/// Runs a required tool; a missing tool fails the test with install instructions, never skips it.
pub fn tool(name: &str, package: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is required by this test and is missing: install it with `apt-get update && apt-get install -y {package}`"
    );
    Command::new(name)
}

pub fn write(dir: &Path, name: &str, content: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, content).unwrap();
    p
}

/// A cluster on an air-gapped cloud: every registry and the packages and manifests mirrored, a CA
/// for the mirror, and a proxy with the user's own exemptions.
pub fn airgapped(version: &str, control_planes: u32, workers: u32) -> ClusterInput {
    let mut c = cluster(version, control_planes, workers);
    let mirror = "https://mirror.example:5000";
    c.airgap = Airgap {
        registries: ["registry.k8s.io", "docker.io", "quay.io", "ghcr.io"]
            .into_iter()
            .map(|r| (r.to_owned(), mirror.to_owned()))
            .collect(),
        ca_bundle: Some(
            "-----BEGIN CERTIFICATE-----\nMIIBmirror\n-----END CERTIFICATE-----".into(),
        ),
        kubernetes_packages: Some("https://mirror.example/pkgs.k8s.io/".into()),
        os_packages: Some("https://mirror.example/ubuntu".into()),
        os_security_packages: None,
        manifests: Some("https://mirror.example/files".into()),
        proxy: Some(Proxy {
            http: Some("http://proxy.example:3128".into()),
            https: Some("http://proxy.example:3128".into()),
            no_proxy: vec!["mirror.example".into(), "10.0.0.0/24".into()],
        }),
    };
    c
}
