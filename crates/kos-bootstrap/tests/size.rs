//! Nova's 65535-byte (base64) limit: the largest realistic cluster fits, an oversized one fails by name.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use kos_bootstrap::cloud_init::render_user_data;
use kos_bootstrap::size::NOVA_USER_DATA_LIMIT;
use kos_bootstrap::*;
use rand::Rng;

#[test]
fn five_control_planes_with_the_largest_options_fit() {
    let s = secrets();
    for delivery in [PkiDelivery::AllControlPlanes, PkiDelivery::UploadCerts] {
        let mut c = cluster("1.36.4", 5, 100);
        c.pki_delivery = delivery;
        c.cert_sans = (0..20)
            .map(|i| format!("api-{i}.a-rather-long-domain-name.demo.example.com"))
            .collect();
        c.ccm = Ccm::Kos {
            image: format!("registry.example.com/{}/kos-ccm:v1.0.0", "x".repeat(100)),
        };
        // kos-csi's manifest is cinder-csi's and a little more.
        c.csi = Csi::Kos {
            image: format!("registry.example.com/{}/kos-csi:v1.0.0", "x".repeat(100)),
        };
        c.cni_manifest = Some(ManifestPin {
            url: format!("https://example.com/{}/cni.yaml", "p".repeat(150)),
            sha256: "a".repeat(64),
        });
        c.server_tls_bootstrap = true;
        let mut n = node(Role::InitControlPlane);
        n.labels = (0..20)
            .map(|i| (format!("example.com/label-{i}"), format!("value-{i}")))
            .collect();
        n.taints = (0..5)
            .map(|i| Taint {
                key: format!("example.com/taint-{i}"),
                value: Some("x".into()),
                effect: TaintEffect::NoSchedule,
            })
            .collect();
        for role in [Role::InitControlPlane, Role::JoinControlPlane, Role::Worker] {
            n.role = role;
            let ud = render_user_data(&c, &n, &s).unwrap();
            assert!(ud.base64_len() <= NOVA_USER_DATA_LIMIT);
            assert_eq!(ud.base64().expose().len(), ud.base64_len());
            println!(
                "{delivery:?} {}: text {} B, payload {} B (gzip: {}), base64 {} B",
                ud.node,
                ud.text.expose().len(),
                ud.payload().len(),
                ud.gzipped,
                ud.base64_len()
            );
            // Comfortably below the limit: the first control plane carries the addons too.
            assert!(
                ud.base64_len() < NOVA_USER_DATA_LIMIT / 2,
                "{}",
                ud.base64_len()
            );
        }
    }
}

#[test]
fn an_oversized_user_data_fails_naming_the_largest_parts() {
    let s = secrets();
    let c = cluster("1.36.4", 1, 0);
    let mut n = node(Role::Worker);
    // Incompressible label values: several hundred KB of kubelet arguments.
    let mut r = rng();
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    n.labels = (0..2000)
        .map(|i| {
            let v: String = (0..60)
                .map(|_| char::from(alphabet[r.random_range(0..alphabet.len())]))
                .collect();
            (format!("example.com/l{i}"), v)
        })
        .collect::<BTreeMap<_, _>>();
    let e = render_user_data(&c, &n, &s).unwrap_err();
    let Error::UserDataTooLarge {
        size, limit, parts, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert!(*size > *limit);
    assert_eq!(parts.0[0].0, "/etc/kos/kubeadm.yaml");
    assert_eq!(parts.0[1].0, "/usr/local/sbin/kos-bootstrap");
    assert!(parts.0.len() <= 5);
    let msg = e.to_string();
    assert!(
        msg.starts_with("user-data for worker node of pool workers is "),
        "{msg}"
    );
    assert!(
        msg.contains("over Nova's 65535-byte limit; largest parts: /etc/kos/kubeadm.yaml ("),
        "{msg}"
    );
    assert!(!msg.contains(s.token.secret.expose()));
}

#[test]
fn rendering_is_deterministic() {
    let s = secrets();
    let c = cluster("1.36.4", 3, 2);
    for role in [Role::InitControlPlane, Role::JoinControlPlane, Role::Worker] {
        let a = render_user_data(&c, &node(role), &s).unwrap();
        let b = render_user_data(&c, &node(role), &s).unwrap();
        assert_eq!(a.payload(), b.payload());
        assert_eq!(a.base64(), b.base64());
    }
}
