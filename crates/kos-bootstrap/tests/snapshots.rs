//! Snapshots of every rendered file, secrets redacted by value (and the redaction counted, so a secret that
//! moved or multiplied shows up as a failing count, not as a silently different snapshot).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use kos_bootstrap::cloud_init::{BOOTSTRAP_SCRIPT, render_user_data};
use kos_bootstrap::*;

/// The user-data text with the script (snapshotted once on its own) and addon manifests (snapshotted by
/// `addons`) folded away.
fn user_data_snapshot(c: &ClusterInput, n: &NodeInput, s: &ClusterSecrets) -> (String, usize) {
    let ud = render_user_data(c, n, s).unwrap();
    let mut text = ud.text.expose().to_string();
    let indent = |t: &str| t.trim_end().replace('\n', "\n    ");
    text = text.replace(
        &indent(BOOTSTRAP_SCRIPT),
        "<kos-bootstrap script, see bootstrap_script snapshot>",
    );
    for m in render_addons(c).unwrap() {
        // The Secret carries the canary: count it before folding the manifest away.
        let secrets_inside = m.yaml.expose().matches(CANARY).count();
        text = text.replace(
            &indent(m.yaml.expose()),
            &format!(
                "<{} ({secrets_inside} secret), see addons snapshot>",
                m.name
            ),
        );
    }
    let (redacted, n_secrets) = redact(&text, s);
    let folded = redacted.matches("1 secret), see addons").count();
    (redacted, n_secrets + folded)
}

#[test]
fn user_data_one_control_plane() {
    let s = secrets();
    let c = cluster("1.36.4", 1, 2);
    // init: 3 CA keys + sa.key + token + certificate key + app-cred (in the folded Secret).
    let (text, n) = user_data_snapshot(&c, &node(Role::InitControlPlane), &s);
    assert_eq!(n, 7);
    insta::assert_snapshot!("user_data_1cp_init", text);
    // worker: the token only.
    let (text, n) = user_data_snapshot(&c, &node(Role::Worker), &s);
    assert_eq!(n, 1);
    insta::assert_snapshot!("user_data_1cp_worker", text);
}

#[test]
fn user_data_three_control_planes() {
    let s = secrets();
    let c = cluster("1.36.4", 3, 2);
    let (text, n) = user_data_snapshot(&c, &node(Role::InitControlPlane), &s);
    assert_eq!(n, 7);
    insta::assert_snapshot!("user_data_3cp_init", text);
    // joining control plane: 3 CA keys + sa.key + token (PKI in user-data, no certificate key).
    let (text, n) = user_data_snapshot(&c, &node(Role::JoinControlPlane), &s);
    assert_eq!(n, 5);
    insta::assert_snapshot!("user_data_3cp_join_control_plane", text);
    let (text, n) = user_data_snapshot(&c, &node(Role::Worker), &s);
    assert_eq!(n, 1);
    insta::assert_snapshot!("user_data_3cp_worker", text);
}

#[test]
fn user_data_upload_certs_join_carries_no_pki() {
    let s = secrets();
    let mut c = cluster("1.36.4", 3, 0);
    c.pki_delivery = PkiDelivery::UploadCerts;
    // token + certificate key, no keys.
    let (text, n) = user_data_snapshot(&c, &node(Role::JoinControlPlane), &s);
    assert_eq!(n, 2);
    assert!(!text.contains("/etc/kubernetes/pki/"));
    insta::assert_snapshot!("user_data_3cp_upload_certs_join_control_plane", text);
}

#[test]
fn user_data_air_gapped() {
    let s = secrets();
    let c = airgapped("1.36.4", 1, 2);
    let (text, n) = user_data_snapshot(&c, &node(Role::InitControlPlane), &s);
    assert_eq!(n, 7);
    insta::assert_snapshot!("user_data_airgapped_init", text);
    // cloud-init's apt module gets the OS mirror for both archives.
    assert!(
        text.contains("apt:\n  primary:\n  - arches:\n    - default\n    uri: https://mirror.example/ubuntu\n  security:\n  - arches:\n    - default\n    uri: https://mirror.example/ubuntu\n"),
        "{text}"
    );
    let (text, n) = user_data_snapshot(&c, &node(Role::Worker), &s);
    assert_eq!(n, 1);
    insta::assert_snapshot!("user_data_airgapped_worker", text);
    // kubeadm names the mirror; CoreDNS keeps registry.k8s.io's layout.
    let kubeadm = render_kubeadm(&c, &node(Role::InitControlPlane), &s).unwrap();
    let k = kubeadm.expose();
    assert!(k.contains("imageRepository: mirror.example:5000\n"), "{k}");
    assert!(
        k.contains("imageRepository: mirror.example:5000/coredns\n"),
        "{k}"
    );
}

#[test]
fn artefacts_name_the_mirror_and_the_origin() {
    let plain = artefacts(&cluster("1.36.4", 1, 0)).unwrap();
    // Without mirrors, everything is fetched where it is published.
    assert!(plain.iter().all(|a| a.fetched == a.origin), "{plain:#?}");
    let a = artefacts(&airgapped("1.36.4", 1, 0)).unwrap();
    // The OS packages first (the script's first install), from the OS mirror.
    assert_eq!(a[0].fetched, "https://mirror.example/ubuntu");
    assert!(
        a[0].note
            .as_deref()
            .unwrap_or_default()
            .contains("containerd")
    );
    let repo = &a[1];
    assert_eq!(
        repo.fetched,
        "https://mirror.example/pkgs.k8s.io/core:/stable:/v1.36/deb/"
    );
    assert_eq!(repo.origin, "https://pkgs.k8s.io/core:/stable:/v1.36/deb/");
    let cni = a.iter().find(|x| x.step == "cni").unwrap();
    assert_eq!(
        cni.fetched,
        "https://mirror.example/files/raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml"
    );
    assert_eq!(
        cni.sha256.as_deref(),
        Some("a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744")
    );
    let fetched: Vec<&str> = a.iter().map(|x| x.fetched.as_str()).collect();
    for want in [
        "mirror.example:5000/kube-apiserver:v1.36.4",
        "mirror.example:5000/calico/node:v3.32.1",
        "mirror.example:5000/provider-os/openstack-cloud-controller-manager:v1.36.0",
        "mirror.example:5000/sig-storage/csi-attacher:v4.10.0",
        // kubeadm's own images, tagged as kubeadm of 1.36 lists them (untagged before): CoreDNS
        // at registry.k8s.io's path, which kos names as its repository.
        "mirror.example:5000/etcd:3.6.8-0",
        "mirror.example:5000/coredns/coredns:v1.14.2",
        "mirror.example:5000/pause:3.10.2",
    ] {
        assert!(fetched.contains(&want), "{want} not in {fetched:#?}");
    }
    // 1.36.4 is past the newest 1.36 kubeadm read: said, with the command that confirms it.
    let pause = a
        .iter()
        .find(|x| x.origin.ends_with("/pause:3.10.2"))
        .unwrap();
    assert!(
        pause
            .note
            .as_deref()
            .is_some_and(|n| n.contains("kubeadm config images list --kubernetes-version v1.36.4")),
        "{pause:?}"
    );
    let read = artefacts(&airgapped("1.35.2", 1, 0)).unwrap();
    let etcd = read.iter().find(|x| x.origin.contains("/etcd:")).unwrap();
    assert_eq!(
        (etcd.origin.as_str(), etcd.note.as_deref()),
        ("registry.k8s.io/etcd:3.6.6-0", None)
    );
    // Every URL and image is the mirror's.
    assert!(
        a.iter().all(|x| x.fetched.contains("mirror.example")),
        "{fetched:#?}"
    );

    // kos-csi: its image instead of cinder-csi's, with the same sidecars, from the mirror of its
    // registry.
    let mut c = airgapped("1.36.4", 1, 0);
    c.csi = Csi::Kos {
        image: "ghcr.io/example/kos-csi:v0.1.0".into(),
    };
    let a = artefacts(&c).unwrap();
    let csi = a
        .iter()
        .find(|x| x.origin == "ghcr.io/example/kos-csi:v0.1.0")
        .expect("kos-csi's image is listed");
    assert_eq!(csi.fetched, "mirror.example:5000/example/kos-csi:v0.1.0");
    assert_eq!(csi.step, "addons");
    let origins: Vec<&str> = a.iter().map(|x| x.origin.as_str()).collect();
    assert!(
        origins.contains(&"registry.k8s.io/sig-storage/csi-attacher:v4.10.0")
            && !origins.iter().any(|o| o.contains("cinder-csi-plugin")),
        "{origins:#?}"
    );
    // `csi: none`: no driver and no sidecar.
    c.csi = Csi::None;
    let a = artefacts(&c).unwrap();
    assert!(
        !a.iter().any(|x| x.origin.contains("/sig-storage/")),
        "{a:#?}"
    );
}

#[test]
fn kubeadm_configs() {
    let s = secrets();
    for (version, tag) in [("1.36.4", "v1beta4")] {
        let c = cluster(version, 3, 2);
        for (role, name, secrets_expected) in [
            (Role::InitControlPlane, "init", 2),
            (Role::JoinControlPlane, "join_control_plane", 1),
            (Role::Worker, "worker", 1),
        ] {
            let (text, n) = redact(render_kubeadm(&c, &node(role), &s).unwrap().expose(), &s);
            assert_eq!(n, secrets_expected, "{tag} {name}");
            insta::assert_snapshot!(format!("kubeadm_{tag}_{name}"), text);
        }
    }
}

#[test]
fn addons() {
    let s = secrets();
    let manifests = render_addons(&cluster("1.36.4", 3, 2)).unwrap();
    let names: Vec<_> = manifests.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "00-cloud-config-secret.yaml",
            "10-openstack-cloud-controller-manager.yaml",
            "20-cinder-csi.yaml",
            "30-storageclass.yaml",
            "40-snapshot-controller.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshots.yaml",
            "crs/50-volumesnapshotclass.yaml"
        ]
    );
    for m in &manifests {
        // Upstream's files byte for byte, checked by their checksums (tests/volume_snapshots.rs).
        if m.name.starts_with("crds/") {
            continue;
        }
        let (text, n) = redact(m.yaml.expose(), &s);
        assert_eq!(n, usize::from(m.name.starts_with("00-")), "{}", m.name);
        insta::assert_snapshot!(
            format!(
                "addons_{}",
                m.name.trim_end_matches(".yaml").replace('/', "_")
            ),
            text
        );
    }
    let mut kos = cluster("1.36.4", 1, 0);
    kos.ccm = Ccm::Kos {
        image: "ghcr.io/example/kos-ccm:v0.1.0".into(),
    };
    let ccm = &render_addons(&kos).unwrap()[1];
    assert_eq!(ccm.name, "10-kos-ccm.yaml");
    let text = ccm.yaml.expose();
    assert!(text.contains("image: ghcr.io/example/kos-ccm:v0.1.0"));
    assert!(text.contains("- /bin/kos-ccm"));
    assert!(text.contains("path: /healthz"));
    assert!(!text.contains("openstack-cloud-controller-manager"));

    // `csi: kos`: kos-csi's manifest in cinder-csi's place, the same StorageClass after it
    // (tests/kos_csi.rs checks its flags and wiring).
    kos.csi = Csi::Kos {
        image: "ghcr.io/example/kos-csi:v0.1.0".into(),
    };
    let manifests = render_addons(&kos).unwrap();
    let names: Vec<_> = manifests.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "00-cloud-config-secret.yaml",
            "10-kos-ccm.yaml",
            "20-kos-csi.yaml",
            "30-storageclass.yaml",
            "40-snapshot-controller.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
            "crds/snapshot.storage.k8s.io_volumesnapshots.yaml",
            "crs/50-volumesnapshotclass.yaml"
        ]
    );
    let (text, n) = redact(manifests[2].yaml.expose(), &s);
    assert_eq!(n, 0);
    insta::assert_snapshot!("addons_20-kos-csi", text);
}

/// The CCM's cloud.conf as a careful operator writes it: Service load balancers open their NodePorts
/// (`manage-security-groups`), use the spec's provider (OVN with the only algorithm it has), and the
/// cloud's CA travels in the Secret when clouds.yaml needs one.
#[test]
fn cloud_conf_reaches_nodeports_uses_the_provider_and_trusts_the_cloud_ca() {
    let conf = |c: &ClusterInput| kos_bootstrap::addons::cloud_conf(c).expose().to_string();
    let mut c = cluster("1.36.4", 1, 0);
    let plain = conf(&c);
    let lb = plain.split("[LoadBalancer]").nth(1).unwrap();
    assert!(lb.contains("\nmanage-security-groups = true\n"), "{plain}");
    assert!(
        !plain.contains("lb-provider") && !plain.contains("ca-file"),
        "{plain}"
    );

    c.cloud.lb_provider = Some("ovn".into());
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    c.cloud.ca_cert = Some(ca.into());
    let ovn = conf(&c);
    let (global, lb) = ovn.split_once("[LoadBalancer]").unwrap();
    assert!(
        global.contains("\nca-file = \"/etc/config/ca.crt\"\n"),
        "{ovn}"
    );
    assert!(lb.contains("\nlb-provider = \"ovn\"\n"), "{ovn}");
    assert!(lb.contains("\nlb-method = \"SOURCE_IP_PORT\"\n"), "{ovn}");
    c.cloud.lb_provider = Some("amphora".into());
    assert!(!conf(&c).contains("lb-method"));

    // The CA is in the Secret the CCM and cinder-csi mount at /etc/config, next to cloud.conf.
    let secret = &render_addons(&c).unwrap()[0];
    let doc: serde_json::Value = serde_saphyr::from_str(secret.yaml.expose()).unwrap();
    assert_eq!(doc["stringData"]["ca.crt"], ca);
    for m in &render_addons(&c).unwrap()[1..] {
        let text = m.yaml.expose();
        if text.contains("secretName: cloud-config") {
            assert!(text.contains("mountPath: /etc/config"), "{}", m.name);
        }
    }
}

/// `csi: none`: no cinder-csi and no default StorageClass, in the addons and in the first control
/// plane's user_data; the CCM and its cloud-config stay.
#[test]
fn addons_without_csi() {
    let mut c = cluster("1.36.4", 1, 0);
    c.csi = Csi::None;
    let names: Vec<_> = render_addons(&c)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(
        names,
        [
            "00-cloud-config-secret.yaml",
            "10-openstack-cloud-controller-manager.yaml"
        ]
    );
    let s = secrets();
    let init = node(Role::InitControlPlane);
    let text = |c: &ClusterInput| {
        render_user_data(c, &init, &s)
            .unwrap()
            .text
            .expose()
            .to_string()
    };
    let (with, without) = (text(&cluster("1.36.4", 1, 0)), text(&c));
    assert!(with.contains("20-cinder-csi.yaml"));
    assert!(!without.contains("20-cinder-csi.yaml"));
    assert!(!without.contains("cinder.csi.openstack.org"));
    assert!(!without.contains("30-storageclass.yaml"));
    assert!(without.contains("10-openstack-cloud-controller-manager.yaml"));
}

#[test]
fn bootstrap_token_secret_manifest() {
    let s = secrets();
    let m = bootstrap_token_secret(&s).unwrap();
    let (text, n) = redact(m.yaml.expose(), &s);
    assert_eq!(n, 1);
    insta::assert_snapshot!("bootstrap_token_secret", text);
}

#[test]
fn bootstrap_script() {
    insta::assert_snapshot!("bootstrap_script", BOOTSTRAP_SCRIPT);
}

#[test]
fn kubeconfig() {
    let s = secrets();
    let c = cluster("1.36.4", 1, 0);
    let kc = render_kubeconfig(
        &mut rng(),
        &c.name,
        &c.endpoint,
        &c.kubernetes_version,
        &s,
        now(),
    )
    .unwrap();
    // The CA travels base64-encoded; the client pair is fresh each time: replace both by field.
    let text: String = kc
        .expose()
        .lines()
        .map(|l| match l.split_once(": ") {
            Some((k, _)) if k.trim_end().ends_with("-data") => format!("{k}: <{}>\n", k.trim()),
            _ => format!("{l}\n"),
        })
        .collect();
    assert_eq!(text.matches("-data>").count(), 3);
    insta::assert_snapshot!("kubeconfig", text);
}
