//! Each way a node fails, provoked on real user_data: the console marker the script writes and the
//! root cause the guest logs behind it.
//!
//! A kubeadm failure's console reason is kubeadm's own error, as the script's `kubeadm_reason` picks
//! it from kubeadm's output (the first failed preflight check, else kubeadm's `error:` line); the
//! tests check it on the console and in the guest's log.
// The test's own hands set up and break the cluster, as no component of it would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kos_bootstrap::{PkiDelivery, Role};
use kos_guest::seam::Host;
use kos_guest::{Logged, ProgramState, ServerEvent};

/// The root cause is in the guest's log and, for a kubeadm step, its start on the console (the
/// script cuts the reason to 300 characters).
fn assert_detail(w: &World, id: &kos_guest::ServerId, needle: &str) {
    let details = w.failure_details(id);
    assert!(
        details.iter().any(|d| d.contains(needle)),
        "{needle:?} not in {details:?}"
    );
    let last = w.markers(id).last().cloned().unwrap_or_default();
    if last.starts_with("kos-bootstrap: kubeadm-") {
        let head: String = needle.chars().take(40).collect();
        assert!(last.contains(&head), "{head:?} not on the console: {last}");
    }
}

/// A formed 1-control-plane cluster; `expected` nodes keep the cleanup waiting.
fn formed(c: &kos_bootstrap::ClusterInput, s: &kos_bootstrap::ClusterSecrets) -> World {
    let mut w = World::new();
    w.boot("cp-0", true, user_data(c, Role::InitControlPlane, s));
    w.settle_hours(1);
    w
}

#[tokio::test]
async fn a_wrong_discovery_hash_fails_the_join() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let text = user_data_text(&c, Role::Worker, &s).replace(
        &s.discovery_hash().unwrap(),
        &format!("sha256:{}", "ab".repeat(32)),
    );
    let id = w.boot("w-0", false, text.into_bytes());
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys",
    );
}

#[tokio::test]
async fn a_deleted_token_fails_the_join() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let token = format!("bootstrap-token-{}", s.token.id);
    w.only_cluster()
        .kube
        .delete::<Secret>(Some("kube-system"), &token)
        .unwrap();
    let id = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        &format!(
            "could not find a JWS signature in the cluster-info ConfigMap for token ID \"{}\"",
            s.token.id
        ),
    );
}

#[tokio::test]
async fn an_expired_token_fails_the_join() {
    let c = cluster("1.34.2", 1, 2);
    let s = secrets();
    let mut w = formed(&c, &s);
    // Just past the token's expiry (the token cleaner removes it), before the kos cleanup's deadline.
    let token = format!("bootstrap-token-{}", s.token.id);
    let secret = w
        .only_cluster()
        .kube
        .get::<Secret>(Some("kube-system"), &token)
        .unwrap()
        .unwrap();
    let expires = kos_guest::cluster::token_expiry(&secret).unwrap();
    let now = kos_guest::Host::now(&w.host);
    w.advance(expires - now + time::Duration::seconds(1));
    assert!(
        !w.markers(&w.control_planes[0].clone())
            .iter()
            .any(|m| m.contains("cleanup"))
    );
    let token = format!("bootstrap-token-{}", s.token.id);
    assert!(
        w.only_cluster()
            .kube
            .get::<Secret>(Some("kube-system"), &token)
            .unwrap()
            .is_none()
    );
    let id = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "could not find a JWS signature in the cluster-info ConfigMap for token ID",
    );
}

/// kubeadm join reads the cluster's configuration as the bootstrap token's user: a token outside
/// the group kubeadm's roles name is refused by RBAC, as on a real cluster.
#[tokio::test]
async fn a_token_outside_the_node_token_group_cannot_read_kubeadm_config() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let token = format!("bootstrap-token-{}", s.token.id);
    w.only_cluster()
        .kube
        .modify::<Secret>(Some("kube-system"), &token, |t| {
            if let Some(d) = t.data.as_mut() {
                d.insert(
                    "auth-extra-groups".into(),
                    k8s_openapi::ByteString(b"system:bootstrappers:other".to_vec()),
                );
            }
        })
        .unwrap();
    let id = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        &format!(
            "unable to fetch the kubeadm-config ConfigMap: 403 Forbidden: configmaps \"kubeadm-config\" is forbidden: User \"system:bootstrap:{}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"kube-system\"",
            s.token.id
        ),
    );
}

fn upload_certs_cluster() -> (kos_bootstrap::ClusterInput, kos_bootstrap::ClusterSecrets) {
    let mut c = cluster("1.34.2", 3, 0);
    c.pki_delivery = PkiDelivery::UploadCerts;
    // The join token outlives kubeadm-certs' two hours, so only the certificates expire.
    (c, secrets_with_ttl(Duration::from_secs(24 * 3600)))
}

#[tokio::test]
async fn expired_kubeadm_certs_fail_a_control_plane_join() {
    let (c, s) = upload_certs_cluster();
    let mut w = formed(&c, &s);
    assert!(w.only_cluster().secret("kubeadm-certs").unwrap().is_some());
    w.advance(time::Duration::minutes(125));
    assert!(w.only_cluster().secret("kubeadm-certs").unwrap().is_none());
    let id = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "Secret \"kubeadm-certs\" was not found in the \"kube-system\" Namespace. This Secret might have expired",
    );
    assert_eq!(w.only_cluster().etcd.len(), 1);
}

#[tokio::test]
async fn a_wrong_certificate_key_cannot_decrypt_kubeadm_certs() {
    let (c, s) = upload_certs_cluster();
    let mut w = formed(&c, &s);
    let text = user_data_text(&c, Role::JoinControlPlane, &s)
        .replace(s.certificate_key.expose(), &"0f".repeat(32));
    let id = w.boot("cp-1", true, text.into_bytes());
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "error decoding secret data with provided key: cipher: message authentication failed",
    );
}

#[tokio::test]
async fn a_join_after_two_of_three_control_planes_went_down_finds_no_quorum() {
    let c = cluster("1.34.2", 4, 0);
    let s = secrets();
    let mut w = World::new();
    w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let cp1 = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    let cp2 = w.boot("cp-2", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(1);
    assert_eq!(w.only_cluster().etcd.len(), 3);
    w.event(&cp1, ServerEvent::Shutdown);
    w.event(&cp2, ServerEvent::Shutdown);
    let id = w.boot("cp-3", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(3);
    // /readyz fails without etcd quorum, so the script never gets to kubeadm join.
    assert_eq!(
        w.markers(&id).last().unwrap(),
        "kos-bootstrap: api-wait failed: API https://203.0.113.10:6443/readyz did not answer within 7200s"
    );
    assert_detail(&w, &id, "etcd of cluster-1 has lost quorum");
    assert_eq!(w.only_cluster().etcd.len(), 3);
}

#[tokio::test]
async fn a_misspelled_kubeadm_field_fails_instead_of_being_ignored() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let text = user_data_text(&c, Role::Worker, &s);
    assert!(text.contains("\n      taints:\n"));
    let id = w.boot(
        "w-0",
        false,
        text.replace("\n      taints:\n", "\n      taint:\n")
            .into_bytes(),
    );
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "unknown field \"nodeRegistration.taint\" in JoinConfiguration (kubeadm ignores it with a warning, so its value is silently lost)",
    );
}

#[tokio::test]
async fn unknown_cloud_config_keys_and_runcmds_are_reported_not_ignored() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let text = user_data_text(&c, Role::Worker, &s).replace(
        "runcmd:\n",
        "packges:\n- vim\nruncmd:\n- [/usr/bin/apt-get, install, -y, vim]\n",
    );
    let id = w.boot("w-0", false, text.into_bytes());
    w.settle_hours(1);
    let console = w.guest.console(&id);
    assert!(console.contains(&"cloud-init: WARNING: unknown cloud-config key \"packges\" (cloud-init only warns about it, so it does nothing)".to_owned()), "{console:?}");
    assert!(
        console
            .iter()
            .any(|l| l.starts_with("cloud-init: WARNING: runcmd /usr/bin/apt-get: not found")),
        "{console:?}"
    );
    let reported = w
        .guest
        .log_of(&id)
        .filter(|l| matches!(l, Logged::Reported(_)))
        .count();
    assert_eq!(reported, 2);
    // The bootstrap after them still runs.
    assert_eq!(w.markers(&id), join_markers());
}

#[tokio::test]
async fn a_recreated_first_control_plane_runs_init_again_and_splits_the_brain() {
    let c = cluster("1.34.2", 3, 0);
    let s = secrets();
    let mut w = World::new();
    let cp0 = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    w.boot("cp-2", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(1);
    let first = w.guest.cluster_of(&cp0).unwrap();
    w.event(&cp0, ServerEvent::Delete);
    w.control_planes.retain(|id| id != &cp0);
    // The same name, a new instance, its init user_data; the load balancer still reaches cp-1, cp-2.
    let again = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.settle_hours(1);
    let second = w.guest.cluster_of(&again).unwrap();
    assert_ne!(first, second);
    assert_eq!(w.guest.clusters().count(), 2);
    assert_eq!(
        w.guest.split_brains(),
        [("203.0.113.10:6443".to_owned(), second, vec![first])]
    );
    let line = format!(
        "kos-guest: split brain: kubeadm init on {again} made {second} while 203.0.113.10:6443 already serves {first}"
    );
    assert!(
        w.guest.console(&again).contains(&line),
        "{:?}",
        w.guest.console(&again)
    );
    // kubeadm init itself succeeds on the node: nothing in the markers shows it.
    assert!(
        w.markers(&again)
            .contains(&"kos-bootstrap: kubeadm-init ok".to_owned())
    );
}

/// KNOWN KOS DEFECT, expected to fail today. The first control plane's cleanup deletes the bootstrap
/// token once the expected nodes registered; a worker added later (scale-up, or a re-created node)
/// boots with that deleted token and cannot join. When kos is fixed (the token outlives the cleanup,
/// or kos re-creates it before booting nodes), this test fails: flip the constant to `false`.
const LATE_WORKER_CANNOT_JOIN_TODAY: bool = true;

#[tokio::test]
async fn a_worker_booted_after_the_cleanup_joins() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = World::new();
    let cp = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(1);
    assert_eq!(w.markers(&cp).last().unwrap(), "kos-bootstrap: cleanup ok");
    // Scale the pool to two: kos renders the same user_data for the new worker.
    let late = w.boot("w-1", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    let joined = w.guest.program(&late) == ProgramState::Done;
    assert_eq!(
        joined,
        !LATE_WORKER_CANNOT_JOIN_TODAY,
        "markers of the late worker: {:?}; details: {:?}",
        w.markers(&late),
        w.failure_details(&late)
    );
    if LATE_WORKER_CANNOT_JOIN_TODAY {
        assert_detail(
            &w,
            &late,
            "could not find a JWS signature in the cluster-info ConfigMap for token ID",
        );
    }
}

#[tokio::test]
async fn a_second_server_with_the_name_of_a_ready_node_cannot_join() {
    let c = cluster("1.34.2", 1, 2);
    let s = secrets_with_ttl(Duration::from_secs(24 * 3600));
    let mut w = formed(&c, &s);
    w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(1);
    let twin = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &twin);
    assert_detail(
        &w,
        &twin,
        "a Node with name \"kos-demo-w-0\" and status \"Ready\" already exists in the cluster",
    );
}

/// A first control plane booted while its endpoint answers nobody, followed until kubeadm init
/// (which reaches its own API server) is done.
fn initialised_behind_a_silent_endpoint(w: &mut World) -> kos_guest::ServerId {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    w.host.route(ENDPOINT, &[]);
    let mut waited = 0;
    while !w.markers(&id).iter().any(|m| m.contains("kubeadm-init ok")) {
        assert!(waited < 3600, "no kubeadm init: {:?}", w.markers(&id));
        w.advance(time::Duration::seconds(5));
        waited += 5;
    }
    id
}

/// The first control plane applies the CNI and the addons through its own API server, at the
/// advertise address kubeadm recorded, not through the endpoint: a load balancer Octavia is still
/// building (it can take minutes, ten under load) does not hold its bootstrap. (Before, kubectl went
/// through admin.conf's endpoint and gave up after the script's ten tries, about 225 s.)
#[tokio::test]
async fn the_cni_and_addons_go_to_the_nodes_own_api_server_not_the_endpoint() {
    let mut w = World::new();
    let id = initialised_behind_a_silent_endpoint(&mut w);
    w.settle_hours(1);
    let markers = w.markers(&id);
    for want in ["cni ok", "addons ok", "metadata-close ok", "bootstrap ok"] {
        assert!(
            markers.iter().any(|m| m.ends_with(want)),
            "{want}: {markers:?}"
        );
    }
    assert!(
        !markers.iter().any(|m| m.contains("retrying")),
        "{markers:?}"
    );
}

/// A kubectl that cannot reach the node's own API server gives up after the script's ten attempts
/// (at least the 225 s its sleeps add up to), naming kubectl's refusal; the step is then `retrying`,
/// not failed, and the resume unit finishes the bootstrap once the API server answers again.
#[tokio::test]
async fn the_cni_gives_up_after_ten_attempts_and_the_unit_tries_again() {
    let mut w = World::new();
    let id = initialised_behind_a_silent_endpoint(&mut w);
    // The first server booted has 10.0.0.10 (World::boot): nothing answers there now.
    w.host.route("10.0.0.10:6443", &[]);
    // Every wake-up in between runs (a plain jump of the clock would run one attempt).
    let start = w.host.now();
    w.host
        .settle(&mut w.guest, time::Duration::seconds(200))
        .unwrap();
    assert!(
        !w.markers(&id).iter().any(|m| m.contains("cni ")),
        "gave up before its attempts: {:?}",
        w.markers(&id)
    );
    w.host
        .settle(
            &mut w.guest,
            start + time::Duration::seconds(300) - w.host.now(),
        )
        .unwrap();
    let last = w.markers(&id).last().cloned().unwrap_or_default();
    assert_eq!(
        last,
        "kos-bootstrap: cni retrying: gave up after 10 attempts: local_kubectl apply -f /etc/kos/cni.yaml"
    );
    assert_detail(
        &w,
        &id,
        "The connection to the server 10.0.0.10:6443 was refused",
    );
    assert!(matches!(w.guest.program(&id), ProgramState::Running { step } if step == "cni"));
    w.host.route("10.0.0.10:6443", &[&id]);
    w.settle_hours(1);
    let markers = w.markers(&id);
    for want in ["cni ok", "addons ok", "metadata-close ok", "bootstrap ok"] {
        assert!(
            markers.iter().any(|m| m.ends_with(want)),
            "{want}: {markers:?}"
        );
    }
    assert_eq!(w.guest.program(&id), ProgramState::Done);
}
