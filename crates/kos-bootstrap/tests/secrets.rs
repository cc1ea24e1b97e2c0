//! Secrets: stored and reused across runs, refreshed token with the same CAs, and the canary never leaks
//! into Debug output, errors or snapshots.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use kos_bootstrap::cloud_init::render_user_data;
use kos_bootstrap::*;

#[test]
fn bundle_round_trips() {
    let s = secrets();
    let bundle = s.to_bundle();
    assert_eq!(ClusterSecrets::from_bundle(bundle.expose()).unwrap(), s);
    // Same seed, same clock: token and certificate key are reproducible (keys come from aws-lc-rs).
    let again = secrets();
    assert_eq!(
        (again.token.clone(), again.certificate_key.clone()),
        (s.token.clone(), s.certificate_key.clone())
    );
    assert_ne!(again.ca, s.ca);
}

#[test]
fn a_rerun_with_an_expired_token_keeps_the_cas() {
    let mut s = secrets();
    let before = s.clone();
    let margin = Duration::from_secs(15 * 60);
    assert!(!s.refresh_token_if_expired(&mut rng(), now() + Duration::from_secs(3600), margin));
    assert_eq!(s, before);
    let later = now() + Duration::from_secs(3 * 3600);
    assert!(s.refresh_token_if_expired(&mut rand::rng(), later, margin));
    assert_ne!(s.token, before.token);
    assert!(s.token.is_well_formed());
    assert_eq!(s.token.expires, later + DEFAULT_TOKEN_TTL);
    assert_eq!(
        (&s.ca, &s.etcd_ca, &s.front_proxy_ca),
        (&before.ca, &before.etcd_ca, &before.front_proxy_ca)
    );
    assert_eq!(s.service_account, before.service_account);
    assert_eq!(s.certificate_key, before.certificate_key);
    assert_eq!(
        s.discovery_hash().unwrap(),
        before.discovery_hash().unwrap()
    );
    // The refreshed secrets survive storage too.
    assert_eq!(
        ClusterSecrets::from_bundle(s.to_bundle().expose()).unwrap(),
        s
    );
}

#[test]
fn broken_bundles_are_refused_without_echoing_them() {
    let s = secrets();
    let bundle = s.to_bundle().expose().to_string();
    let token_secret = s.token.secret.expose().to_string();
    let cases = [
        bundle.replace(&format!("\"{token_secret}\""), "42"),
        bundle.replace(&token_secret, "UPPERCASE-NOPE!!"),
        bundle.replace("kos-cluster-secrets/v1", "kos-cluster-secrets/v0"),
        bundle.replacen("-----BEGIN PRIVATE KEY-----", "-----BEGIN NOTHING-----", 1),
        bundle.replacen('{', "{\"extra\": 1,", 1),
        bundle[..bundle.len() / 2].to_string(),
    ];
    for case in cases {
        let e = ClusterSecrets::from_bundle(&case).unwrap_err().to_string();
        assert!(
            !e.contains(&token_secret)
                && !e.contains("PRIVATE KEY")
                && !e.contains(s.certificate_key.expose()),
            "{e}"
        );
    }
}

#[test]
fn the_canary_never_leaks() {
    let s = secrets();
    let c = cluster("1.36.4", 3, 2);
    let mut debug = vec![format!("{c:?}"), format!("{s:?}"), format!("{:?}", c.cloud)];
    for role in [Role::InitControlPlane, Role::JoinControlPlane, Role::Worker] {
        let ud = render_user_data(&c, &node(role), &s).unwrap();
        debug.push(format!("{ud:?}"));
        debug.push(format!("{:?} {}", ud.text, ud.text));
        debug.push(format!(
            "{:?}",
            render_kubeadm(&c, &node(role), &s).unwrap()
        ));
    }
    let addons = render_addons(&c).unwrap();
    debug.push(format!("{addons:?}"));
    debug.push(format!("{:?}", bootstrap_token_secret(&s).unwrap()));
    // Errors: a secret that fails validation is not quoted back.
    let mut bad = c.clone();
    bad.cloud.application_credential_secret = format!("{CANARY}\nsecond line").into();
    debug.push(render_addons(&bad).unwrap_err().to_string());
    debug.push(format!(
        "{:?}",
        render_user_data(&bad, &node(Role::InitControlPlane), &s).unwrap_err()
    ));
    for d in &debug {
        assert!(!d.contains(CANARY), "canary in {d}");
        for secret in [
            s.token.secret.expose(),
            s.certificate_key.expose(),
            s.ca.key_pem.expose(),
        ] {
            assert!(!d.contains(secret), "secret in {d}");
        }
    }
    // It is where it must be: in the Secret, once, and in the first control plane's user-data only.
    assert_eq!(addons[0].yaml.expose().matches(CANARY).count(), 1);
    assert!(
        addons[1..]
            .iter()
            .all(|m| !m.yaml.expose().contains(CANARY))
    );
    let count = |role| {
        render_user_data(&c, &node(role), &s)
            .unwrap()
            .text
            .expose()
            .matches(CANARY)
            .count()
    };
    assert_eq!(
        (
            count(Role::InitControlPlane),
            count(Role::JoinControlPlane),
            count(Role::Worker)
        ),
        (1, 0, 0)
    );
}

#[test]
fn workers_never_get_keys() {
    let s = secrets();
    let ud = render_user_data(&cluster("1.36.4", 3, 2), &node(Role::Worker), &s).unwrap();
    let text = ud.text.expose();
    assert!(!text.contains("PRIVATE KEY"));
    assert!(
        ud.files
            .iter()
            .all(|f| !f.path.starts_with("/etc/kubernetes/pki"))
    );
    assert!(!text.contains(s.certificate_key.expose()));
    assert!(text.contains(s.token.value().expose()));
    assert!(
        ud.files
            .iter()
            .filter(|f| f.path.starts_with("/etc/kos/"))
            .all(|f| f.permissions == "0600")
    );
}

#[test]
fn control_plane_keys_are_0600() {
    let s = secrets();
    let ud = render_user_data(&cluster("1.36.4", 3, 2), &node(Role::JoinControlPlane), &s).unwrap();
    let pki: Vec<_> = ud
        .files
        .iter()
        .filter(|f| f.path.starts_with("/etc/kubernetes/pki/"))
        .collect();
    assert_eq!(pki.len(), 8);
    assert!(pki.iter().all(|f| f.permissions == "0600"));
}
