//! cloud-init and the bootstrap script's steps on real user_data: the guest follows the script the
//! node was given, and what it cannot simulate fails or is reported, visibly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kos_bootstrap::{Cni, ManifestPin, Role};
use kos_guest::bootstrap::{script, steps::KNOWN_STEPS};
use kos_guest::kubelet::ready_status;
use kos_guest::{Logged, ProgramState, ServerEvent, ServerId};

#[test]
fn the_guest_knows_exactly_the_steps_the_script_declares() {
    let plan = script::parse(kos_bootstrap::cloud_init::BOOTSTRAP_SCRIPT).unwrap();
    // Each step once, where the script first declares it (both role branches end with one).
    let mut declared: Vec<(String, String)> = Vec::new();
    for s in plan.all_steps() {
        let pair = (s.name, s.function);
        if !declared.contains(&pair) {
            declared.push(pair);
        }
    }
    let known: Vec<(String, String)> = KNOWN_STEPS
        .iter()
        .map(|(n, f)| ((*n).to_owned(), (*f).to_owned()))
        .collect();
    assert_eq!(
        declared, known,
        "the script and the guest disagree: update kos-guest's steps"
    );
    // The script's own order per role, as a person reads it (not through the guest's parser).
    let names = |role| -> Vec<String> {
        plan.for_role(role)
            .unwrap()
            .steps
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    assert_eq!(names("init"), [COMMON, &INIT[..4]].concat());
    assert_eq!(names("worker"), [COMMON, &JOIN[..3]].concat());
    assert_eq!(names("join-control-plane"), names("worker"));
    // The first control plane tries again what follows kubeadm init, through a unit that restarts.
    assert_eq!(
        plan.for_role("init").unwrap().resumable_from,
        Some(COMMON.len() + 1)
    );
    assert_eq!(plan.for_role("worker").unwrap().resumable_from, None);
    assert!(
        plan.resume.is_some(),
        "the script's resume unit is not read"
    );
}

#[tokio::test]
async fn a_step_the_guest_does_not_know_fails_as_not_simulated() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let text = user_data_text(&c, Role::InitControlPlane, &s);
    let line = "      step metadata-block metadata_block_step\n";
    assert!(text.contains(line));
    let text = text.replace(line, &format!("{line}      step frobnicate frobnicate\n"));
    let mut w = World::new();
    let id = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    assert_eq!(
        w.markers(&id).last().unwrap(),
        "kos-bootstrap: frobnicate failed: step frobnicate (runs frobnicate) is not simulated by kos-guest"
    );
    assert_eq!(
        w.guest.program(&id),
        ProgramState::Failed {
            step: "frobnicate".into()
        }
    );
}

#[tokio::test]
async fn an_unknown_role_fails_after_the_common_steps_as_the_script_does() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let text =
        user_data_text(&c, Role::Worker, &s).replace("KOS_ROLE='worker'", "KOS_ROLE='gateway'");
    let mut w = World::new();
    let id = w.boot("gw-0", false, text.into_bytes());
    w.settle_hours(1);
    let mut want = ok(COMMON);
    want.push("kos-bootstrap: preflight failed: unknown role gateway".into());
    assert_eq!(w.markers(&id), want);
}

#[tokio::test]
async fn unsupported_jinja_fails_the_user_data_and_nothing_runs() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let text = user_data_text(&c, Role::Worker, &s).replace(
        "#cloud-config\n",
        "#cloud-config\n# {% if v1.region %}x{% endif %}\n",
    );
    let mut w = World::new();
    let id = w.boot("w-0", false, text.into_bytes());
    // As cloud-init's console handler writes it: `<asctime> - <file>[WARNING]: <message>`.
    let console = w.guest.console(&id);
    assert_eq!(console.len(), 1, "{console:?}");
    let (asctime, warning) = console[0].split_once(" - ").expect("a stamped line");
    assert_eq!(asctime.len(), "2026-11-30 12:00:00,123".len(), "{asctime}");
    assert_eq!(
        warning,
        "jinja_template.py[WARNING]: Ignoring jinja template for /var/lib/cloud/instance/user-data.txt. \
         Failed to render template. Jinja statement {% ... %} is not simulated by kos-guest"
    );
    assert_eq!(w.guest.program(&id), ProgramState::None);
}

#[tokio::test]
async fn mime_multipart_with_a_shell_part_reports_it_and_runs_the_cloud_config() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let cc = user_data_text(&c, Role::InitControlPlane, &s);
    let mime = format!(
        "Content-Type: multipart/mixed; boundary=\"==B==\"\nMIME-Version: 1.0\n\n--==B==\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n--==B==\nContent-Type: text/jinja2\n\n{cc}--==B==--\n"
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(mime.as_bytes()).unwrap();
    let mut w = World::new();
    let id = w.boot("cp-0", true, gz.finish().unwrap());
    w.settle_hours(1);
    assert!(
        w.guest.console(&id).contains(
            &"cloud-init: WARNING: a shell-script part is not simulated (kos-guest runs no shell)"
                .to_owned()
        )
    );
    assert_eq!(&w.markers(&id)[..10], init_markers());
}

/// kos's own pins (no `cniManifest`): each built-in CNI downloads, matches its checksum and installs,
/// and the node becomes Ready. (With the pins of old, unverified, every real cluster failed here.)
#[tokio::test]
async fn kos_s_own_cni_pins_install_and_nodes_become_ready() {
    for (cni, daemonset) in [
        (Cni::Calico, "calico-node"),
        (Cni::Flannel, "kube-flannel-ds"),
        (Cni::KubeRouter, "kube-router"),
    ] {
        let mut c = cluster("1.34.2", 1, 0);
        c.cni = cni;
        c.cni_manifest = None;
        let s = secrets();
        let mut w = World::new();
        let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
        w.settle_hours(1);
        assert!(
            w.markers(&id).contains(&"kos-bootstrap: cni ok".to_owned()),
            "{cni:?}: {:?}",
            w.markers(&id)
        );
        let kube = &w.only_cluster().kube;
        let n = kube.get::<Node>(None, "kos-demo-cp-0").unwrap().unwrap();
        assert_eq!(ready_status(&n), Some("True"), "{cni:?}");
        assert!(
            kube.get::<k8s_openapi::api::apps::v1::DaemonSet>(Some("kube-system"), daemonset)
                .unwrap()
                .is_some(),
            "{cni:?}: {daemonset}"
        );
    }
}

#[tokio::test]
async fn a_cni_download_is_checked_like_the_real_script() {
    let s = secrets();
    for (url, sha, reason) in [
        (CALICO_URL, "0".repeat(64), format!("sha256 mismatch for {CALICO_URL}")),
        (
            "https://example.com/cni.yaml",
            CALICO_SHA256.to_owned(),
            "curl: (22) The requested URL returned error: 404 (https://example.com/cni.yaml is not on kos-guest's internet)".to_owned(),
        ),
    ] {
        let mut c = cluster("1.34.2", 1, 0);
        c.cni_manifest = Some(ManifestPin {
            url: url.into(),
            sha256: sha,
        });
        let mut w = World::new();
        let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
        w.settle_hours(1);
        // After kubeadm init a failed step is tried again, every minute, never given up.
        assert_eq!(w.markers(&id).last().unwrap(), &format!("kos-bootstrap: cni retrying: {reason}"));
        assert!(
            !w.markers(&id).iter().any(|m| m.contains("failed")),
            "{:?}",
            w.markers(&id)
        );
    }
}

/// A CNI download that fails for a while (an outage of the manifest's host) does not end the first
/// control plane's bootstrap: each failed attempt says `cni retrying` with curl's error, the resume
/// unit tries again a minute later and every minute after, and once the host answers the node
/// finishes on its own (the CNI, the addons, the metadata service closed, `bootstrap ok`).
#[tokio::test]
async fn a_cni_download_that_fails_for_a_while_is_finished_by_the_node_itself() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let mut w = World::new();
    w.host
        .set_offline("https://raw.githubusercontent.com/", true);
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let retrying =
        "kos-bootstrap: cni retrying: curl: (6) Could not resolve host: raw.githubusercontent.com";
    let markers = w.markers(&id);
    assert_eq!(markers.last().map(String::as_str), Some(retrying));
    // One attempt when the step first ran, then one a minute for the rest of the hour.
    let tries = markers.iter().filter(|m| *m == retrying).count();
    assert!((55..=61).contains(&tries), "{tries}: {markers:?}");
    assert!(!markers.iter().any(|m| m.contains("bootstrap ok")));
    assert!(matches!(w.guest.program(&id), ProgramState::Running { step } if step == "cni"));

    w.host
        .set_offline("https://raw.githubusercontent.com/", false);
    w.settle_hours(1);
    let markers = w.markers(&id);
    let last_try = markers.iter().rposition(|m| m == retrying).unwrap_or(0);
    let after: Vec<&str> = markers[last_try + 1..].iter().map(String::as_str).collect();
    assert_eq!(
        &after[..4],
        [
            "kos-bootstrap: cni ok",
            "kos-bootstrap: addons ok",
            "kos-bootstrap: metadata-close ok",
            "kos-bootstrap: bootstrap ok",
        ],
        "{markers:?}"
    );
    assert_eq!(w.guest.program(&id), ProgramState::Done);
    let kube = &w.only_cluster().kube;
    let n = kube.get::<Node>(None, "kos-demo-cp-0").unwrap().unwrap();
    assert_eq!(ready_status(&n), Some("True"));
}

#[tokio::test]
async fn no_ca_on_disk_makes_kubeadm_generate_one_that_no_join_can_pin() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let text = user_data_text(&c, Role::InitControlPlane, &s).replace(
        "path: /etc/kubernetes/pki/ca.",
        "path: /etc/kubernetes/elsewhere/ca.",
    );
    let mut w = World::new();
    let cp = w.boot("cp-0", true, text.into_bytes());
    let wk = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert!(
        w.markers(&cp)
            .contains(&"kos-bootstrap: kubeadm-init ok".to_owned())
    );
    assert!(
        w.guest
            .log_of(&cp)
            .any(|l| matches!(l, Logged::GeneratedCa { .. }))
    );
    assert_join_failed(&w, &wk);
    let details = w.failure_details(&wk);
    assert!(
        details
            .iter()
            .any(|d| d.contains("none of the public keys")),
        "{details:?}"
    );
}

/// The metadata service as the node's processes see it: pods never, the node itself until its
/// bootstrap ends; after a reboot the unit closes it again (the rules are the script's own).
#[tokio::test]
async fn the_metadata_service_is_closed_after_bootstrap_and_after_every_boot() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let mut w = World::new();
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let view = |w: &World| {
        w.guest
            .metadata_views()
            .into_iter()
            .find(|v| v.server == id.0)
            .unwrap()
    };
    w.settle_hours(1);
    assert_eq!(&w.markers(&id)[..10], init_markers());
    let after = view(&w);
    assert_eq!((after.pod, after.host_network), (Some(false), Some(false)));
    assert!(after.config_drive);
    w.event(&id, ServerEvent::Shutdown);
    w.event(&id, ServerEvent::Reboot);
    let rebooted = view(&w);
    assert_eq!(
        (rebooted.pod, rebooted.host_network),
        (Some(false), Some(false))
    );

    // A script whose close goes to the wrong chain leaves hostNetwork pods reading user_data.
    let text = user_data_text(&c, Role::InitControlPlane, &s).replace(
        "\"$KOS_IPTABLES\" -w -t filter -I OUTPUT 1 \"${rule[@]}\"",
        "\"$KOS_IPTABLES\" -w -t filter -I INPUT 1 \"${rule[@]}\"",
    );
    let mut w = World::new();
    let id = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    let broken = w
        .guest
        .metadata_views()
        .into_iter()
        .find(|v| v.server == id.0)
        .unwrap();
    assert_eq!(broken.host_network, Some(true));
}

/// The bootstrap's log on a node.
fn log(w: &World, id: &ServerId) -> String {
    w.guest
        .vfs(id)
        .and_then(|v| v.text("/var/log/kos-bootstrap.log").map(str::to_owned))
        .unwrap_or_default()
}

/// The public hosts a bootstrap fetches from, as an air-gapped cloud refuses them.
const PUBLIC: &[&str] = &[
    "http://archive.ubuntu.com/",
    "http://security.ubuntu.com/",
    "https://pkgs.k8s.io/",
    "https://raw.githubusercontent.com/",
    "https://registry.k8s.io/",
    "https://registry-1.docker.io/",
    "https://quay.io/",
    "https://ghcr.io/",
];

fn mirrored(c: &mut kos_bootstrap::ClusterInput) {
    c.airgap = kos_bootstrap::Airgap {
        registries: ["registry.k8s.io", "docker.io", "quay.io", "ghcr.io"]
            .into_iter()
            .map(|r| (r.to_owned(), "https://mirror.example:5000".to_owned()))
            .collect(),
        kubernetes_packages: Some("https://mirror.example/pkgs.k8s.io".into()),
        os_packages: Some("https://mirror.example/ubuntu".into()),
        manifests: Some("https://mirror.example/files".into()),
        ..Default::default()
    };
}

/// On a cloud that reaches none of the public hosts, a node whose user_data names mirrors comes up
/// from them; without the mirrors it stops at the first download with curl's or kubeadm's reason;
/// with the packages mirrored but not the images, at kubeadm's image pull.
#[tokio::test]
async fn an_air_gapped_node_bootstraps_from_its_mirrors_and_fails_clearly_without() {
    let s = secrets();
    let offline = |w: &World| {
        for p in PUBLIC {
            w.host.set_offline(p, true);
        }
    };
    let mut c = cluster("1.36.4", 1, 0);
    mirrored(&mut c);
    let mut w = World::new();
    offline(&w);
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let want = init_markers();
    assert_eq!(w.markers(&id)[..want.len()], want[..]);
    // containerd runs pods on kubeadm's pause, from the mirror: kubeadm does not warn.
    let config = w
        .guest
        .vfs(&id)
        .and_then(|v| v.text("/etc/containerd/config.toml"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        config.contains("sandbox_image = \"mirror.example:5000/pause:3.10.2\""),
        "{config}"
    );
    assert!(!log(&w, &id).contains("inconsistent"), "{}", log(&w, &id));

    // kubeadm pulls etcd and CoreDNS too, CoreDNS at registry.k8s.io's path in the mirror (kos
    // names its repository): a mirror without either stops kubeadm init at its image pull.
    for (missing, image) in [
        ("v2/etcd/", "mirror.example:5000/etcd:3.6.8-0"),
        (
            "v2/coredns/coredns/",
            "mirror.example:5000/coredns/coredns:v1.14.2",
        ),
        ("v2/pause/", "mirror.example:5000/pause:3.10.2"),
    ] {
        let mut w = World::new();
        offline(&w);
        w.host
            .set_offline(&format!("https://mirror.example:5000/{missing}"), true);
        let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
        w.settle_hours(1);
        let last = w.markers(&id).last().cloned().unwrap_or_default();
        assert!(
            last.starts_with(&format!(
                "kos-bootstrap: kubeadm-init failed: kubeadm init failed after 3 attempts: [ERROR ImagePull]: failed to pull image {image}"
            )),
            "{last}"
        );
    }

    let plain = cluster("1.36.4", 1, 0);
    let mut w = World::new();
    offline(&w);
    let id = w.boot("cp-0", true, user_data(&plain, Role::InitControlPlane, &s));
    w.settle_hours(1);
    // The reason names the archive apt could not fetch and the fix; apt's own words are in the
    // log before it.
    assert_eq!(
        w.markers(&id).last().map(String::as_str),
        Some(
            "kos-bootstrap: packages failed: the OS packages' archive is unreachable (Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  Temporary failure resolving 'archive.ubuntu.com'): set mirrors.packages.os, or fix the image's apt sources"
        )
    );
    assert!(
        log(&w, &id).contains("W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  Temporary failure resolving 'archive.ubuntu.com'"),
        "{}",
        log(&w, &id)
    );

    // The Kubernetes packages mirrored, the OS packages not: the image's archive is unreachable.
    let mut k8s_only = cluster("1.36.4", 1, 0);
    k8s_only.airgap.kubernetes_packages = Some("https://mirror.example/pkgs.k8s.io".into());
    let mut w = World::new();
    offline(&w);
    let id = w.boot(
        "cp-0",
        true,
        user_data(&k8s_only, Role::InitControlPlane, &s),
    );
    w.settle_hours(1);
    assert!(
        log(&w, &id).contains("Temporary failure resolving 'archive.ubuntu.com'"),
        "{}",
        log(&w, &id)
    );

    // A separate security mirror that is down: apt reaches the archive but not -security.
    let mut no_security = cluster("1.36.4", 1, 0);
    mirrored(&mut no_security);
    no_security.airgap.os_security_packages = Some("http://security-mirror.example/ubuntu".into());
    let mut w = World::new();
    offline(&w);
    w.host.set_offline("http://security-mirror.example/", true);
    let id = w.boot(
        "cp-0",
        true,
        user_data(&no_security, Role::InitControlPlane, &s),
    );
    w.settle_hours(1);
    let l = log(&w, &id);
    assert!(
        l.contains(
            "Failed to fetch http://security-mirror.example/ubuntu/dists/noble-security/InRelease"
        ) && !l.contains("Failed to fetch https://mirror.example"),
        "{l}"
    );

    let mut packages_only = cluster("1.36.4", 1, 0);
    packages_only.airgap.kubernetes_packages = Some("https://mirror.example/pkgs.k8s.io".into());
    packages_only.airgap.os_packages = Some("https://mirror.example/ubuntu".into());
    let mut w = World::new();
    offline(&w);
    let id = w.boot(
        "cp-0",
        true,
        user_data(&packages_only, Role::InitControlPlane, &s),
    );
    w.settle_hours(1);
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("kos-bootstrap: kubeadm-init failed: kubeadm init failed after 3 attempts: [ERROR ImagePull]: failed to pull image registry.k8s.io/kube-apiserver:v1.36.4")
            && last.ends_with("lookup registry.k8s.io: no such host"),
        "{last}"
    );
}

/// kubeadm join pulls nothing on a worker: its kubelet pulls the pod sandbox image when the first
/// pods (the CNI's) start, and until it has the image no pod runs there, so the Node stays NotReady
/// although the join succeeded. The kubelet retries with its backoff: once the registry answers,
/// the node becomes Ready, and the image came from where the node's containerd says (here,
/// registry.k8s.io itself).
#[tokio::test]
async fn a_worker_that_cannot_pull_the_sandbox_image_stays_not_ready_until_it_can() {
    let c = cluster("1.36.4", 1, 1);
    let s = secrets();
    let mut w = World::new();
    let cp = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    assert_eq!(&w.markers(&cp)[..init_markers().len()], init_markers());
    let pause = "https://registry.k8s.io/v2/pause/";
    w.host.set_offline(pause, true);
    let wk = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(1);
    assert_eq!(w.markers(&wk), join_markers());
    let ready = |w: &World, name: &str| {
        let n = w
            .only_cluster()
            .kube
            .get::<Node>(None, name)
            .unwrap()
            .unwrap();
        ready_status(&n).map(str::to_owned)
    };
    assert_eq!(ready(&w, "kos-demo-w-0").as_deref(), Some("False"));
    assert_eq!(ready(&w, "kos-demo-cp-0").as_deref(), Some("True"));
    // Still NotReady much later: nothing but the pull makes it Ready.
    w.advance(time::Duration::minutes(30));
    assert_eq!(ready(&w, "kos-demo-w-0").as_deref(), Some("False"));

    w.host.set_offline(pause, false);
    // The kubelet's backoff is at most 5 minutes.
    w.advance(time::Duration::minutes(5));
    assert_eq!(ready(&w, "kos-demo-w-0").as_deref(), Some("True"));
    let fetched = w.guest.fetched(&wk);
    assert!(fetched.iter().any(|u| u.starts_with(pause)), "{fetched:?}");
}

/// On a cloud whose nodes reach no public host but a proxy, a node given only the proxy comes up
/// through it: apt and curl through the script's exported proxy, containerd through its drop-in.
/// A proxy the nodes cannot reach stops the first download with the tool's own words, and so does
/// a proxy that cannot reach a host that is down; a proxy in the script but not in containerd's
/// drop-in would stop kubeadm's pull.
#[tokio::test]
async fn a_node_behind_a_proxy_fetches_through_it() {
    let s = secrets();
    let mut c = cluster("1.36.4", 1, 0);
    c.airgap.proxy = Some(kos_bootstrap::Proxy {
        http: Some("http://proxy.example:3128".into()),
        https: Some("http://proxy.example:3128".into()),
        no_proxy: Vec::new(),
    });
    let offline = |w: &World| {
        for p in PUBLIC {
            w.host.set_offline(p, true);
        }
    };
    let mut w = World::new();
    offline(&w);
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let want = init_markers();
    assert_eq!(w.markers(&id)[..want.len()], want[..], "{}", log(&w, &id));

    // The proxy down: apt names it.
    let mut w = World::new();
    offline(&w);
    w.host.set_offline("http://proxy.example:3128", true);
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("kos-bootstrap: packages failed: the OS packages' archive is unreachable (Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  Could not resolve 'proxy.example')"),
        "{last}"
    );

    // The proxy up but a host behind it down: the proxy's 503 in each tool's words (before, a
    // proxy the node reached always reached its target).
    let down = |host: &str| {
        let w = World::new();
        offline(&w);
        w.host.set_down(host, true);
        w
    };
    let mut w = down("http://archive.ubuntu.com/");
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("kos-bootstrap: packages failed: the OS packages' archive is unreachable (Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  503  Service Unavailable)"),
        "{last}"
    );
    let mut w = down("https://registry.k8s.io/");
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("kos-bootstrap: kubeadm-init failed: kubeadm init failed after 3 attempts: [ERROR ImagePull]: failed to pull image registry.k8s.io/kube-apiserver:v1.36.4")
            && last.contains("\": Service Unavailable"),
        "{last}"
    );

    // Without the proxy, the same cloud stops at the first download.
    let plain = cluster("1.36.4", 1, 0);
    let mut w = World::new();
    offline(&w);
    let id = w.boot("cp-0", true, user_data(&plain, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert!(
        last.contains("Temporary failure resolving 'archive.ubuntu.com'"),
        "{last}"
    );
}

/// The addons step applies as kubectl does: a directory's own files only, and every kind mapped
/// before any object is created. The snapshot class sent in the same apply as its CRD finds no
/// kind (the CRD is created; the step is retried and then succeeds), which kos's subdirectories
/// (CRDs applied and waited for, then the class) avoid; a class left in a subdirectory no command
/// names is never applied.
#[tokio::test]
async fn addons_apply_as_kubectl_maps_kinds_before_creating_any() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    // As rendered: no retry, the class applied after its CRDs.
    let mut w = World::new();
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let markers = w.markers(&id);
    assert!(
        markers.contains(&"kos-bootstrap: addons ok".to_owned()),
        "{markers:?}"
    );
    let log = w
        .guest
        .vfs(&id)
        .and_then(|v| v.text("/var/log/kos-bootstrap.log").map(str::to_owned))
        .unwrap_or_default();
    assert!(!log.contains("no matches for kind"), "{log}");
    let classes = w
        .only_cluster()
        .kube
        .list_json("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass", None)
        .unwrap();
    assert_eq!(classes.len(), 1);

    // Everything in one directory: the first apply cannot map the class.
    let text = user_data_text(&c, Role::InitControlPlane, &s)
        .replace("path: /etc/kos/addons/crds/", "path: /etc/kos/addons/")
        .replace("path: /etc/kos/addons/crs/", "path: /etc/kos/addons/");
    let mut w = World::new();
    let id = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    // The script's `retry` runs the apply again; the first one's error is in the bootstrap log.
    let log = w
        .guest
        .vfs(&id)
        .and_then(|v| v.text("/var/log/kos-bootstrap.log").map(str::to_owned))
        .unwrap_or_default();
    assert!(
        log.contains("no matches for kind \"VolumeSnapshotClass\""),
        "{log}"
    );
    let markers = w.markers(&id);
    assert!(
        markers.contains(&"kos-bootstrap: addons ok".to_owned()),
        "{markers:?}"
    );

    // A directory no command applies: kubectl does not descend into it.
    let text = user_data_text(&c, Role::InitControlPlane, &s).replace(
        "path: /etc/kos/addons/crs/",
        "path: /etc/kos/addons/more/crs/",
    );
    let mut w = World::new();
    let id = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    assert!(
        w.markers(&id)
            .contains(&"kos-bootstrap: addons ok".to_owned())
    );
    let classes = w
        .only_cluster()
        .kube
        .list_json("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass", None)
        .unwrap();
    assert!(classes.is_empty(), "{classes:?}");
}
