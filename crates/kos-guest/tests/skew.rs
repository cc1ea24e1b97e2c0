//! Kubernetes versions per node, as kubeadm deploys them (issue 11's upgrade): a join reads the
//! cluster's version from the `kube-system/kubeadm-config` ConfigMap, a control plane's static pods
//! run that version whatever its own kubeadm's, kubeadm refuses a cluster more than one minor older
//! than itself and nothing else, and what the version skew policy forbids is reported
//! (`Guest::skew_violations`) instead of being refused where kubeadm does not refuse it.
// The test's own hands set up and break the cluster, as no component of it would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kos_bootstrap::Role;
use kos_guest::{ClusterId, ServerId};

/// Secrets whose join token outlives the hours these tests let pass.
fn day_long_secrets() -> kos_bootstrap::ClusterSecrets {
    secrets_with_ttl(std::time::Duration::from_secs(24 * 3600))
}

/// A formed cluster of one control plane at `version`.
fn formed(
    version: &str,
    control_planes: u32,
    workers: u32,
    s: &kos_bootstrap::ClusterSecrets,
) -> World {
    let c = cluster(version, control_planes, workers);
    let mut w = World::new();
    w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, s));
    w.settle_hours(1);
    w
}

fn cid(w: &World) -> ClusterId {
    w.only_cluster().id
}

fn api_version(w: &World, id: &ServerId) -> Option<String> {
    w.guest.api_server_version(id).map(|v| v.to_string())
}

/// What a client (kubectl edit, Cluster API's UpdateKubernetesVersionInKubeadmConfigMap) does to
/// the cluster's ClusterConfiguration: a text edit of its one key.
fn edit_cluster_configuration(w: &World, edit: impl Fn(&str) -> String) {
    w.only_cluster()
        .kube
        .modify::<ConfigMap>(Some("kube-system"), "kubeadm-config", |cm| {
            let data = cm.data.as_mut().unwrap();
            let text = data["ClusterConfiguration"].clone();
            data.insert("ClusterConfiguration".into(), edit(&text));
        })
        .unwrap();
}

fn set_version(w: &World, from: &str, to: &str) {
    edit_cluster_configuration(w, |t| {
        assert!(t.contains(&format!("kubernetesVersion: {from}\n")), "{t}");
        t.replace(
            &format!("kubernetesVersion: {from}\n"),
            &format!("kubernetesVersion: {to}\n"),
        )
    });
}

fn mirror_image(w: &World, pod: &str) -> String {
    let p = w
        .only_cluster()
        .kube
        .get::<Pod>(Some("kube-system"), pod)
        .unwrap()
        .unwrap();
    p.spec.unwrap().containers[0].image.clone().unwrap()
}

#[tokio::test]
async fn a_control_plane_joins_at_the_version_of_kubeadm_config_until_a_client_changes_it() {
    let s = day_long_secrets();
    let mut w = formed("1.35.2", 3, 0, &s);
    let cp0 = w.control_planes[0].clone();
    let next = cluster("1.36.0", 3, 0);

    // kubeadm 1.36 joins a 1.35 cluster (its preflight checks the kubelet against no control
    // plane version): the static pods run the ConfigMap's 1.35, the kubelet is 1.36.
    let cp1 = w.boot("cp-1", true, user_data(&next, Role::JoinControlPlane, &s));
    w.settle_hours(2);
    assert_eq!(
        w.markers(&cp1),
        join_markers(),
        "{:?}",
        w.failure_details(&cp1)
    );
    assert_eq!(api_version(&w, &cp1).as_deref(), Some("v1.35.2"));
    assert_eq!(
        mirror_image(&w, "kube-apiserver-kos-demo-cp-1"),
        "registry.k8s.io/kube-apiserver:v1.35.2"
    );
    let violations = w.guest.skew_violations(cid(&w));
    assert_eq!(violations.len(), 1, "{violations:?}");
    let v = violations.first().unwrap();
    assert!(
        v.starts_with("kubelet v1.36.0 of kos-demo-cp-1 is newer than kube-apiserver v1.35.2 on"),
        "{v}"
    );

    // Cluster API's first upgrade step: the ConfigMap says 1.36; the next join runs 1.36.
    set_version(&w, "v1.35.2", "v1.36.0");
    let cp2 = w.boot("cp-2", true, user_data(&next, Role::JoinControlPlane, &s));
    w.settle_hours(2);
    assert_eq!(
        w.markers(&cp2),
        join_markers(),
        "{:?}",
        w.failure_details(&cp2)
    );
    assert_eq!(api_version(&w, &cp2).as_deref(), Some("v1.36.0"));
    assert_eq!(
        mirror_image(&w, "kube-scheduler-kos-demo-cp-2"),
        "registry.k8s.io/kube-scheduler:v1.36.0"
    );
    // Each API server keeps the version it was written with.
    assert_eq!(api_version(&w, &cp0).as_deref(), Some("v1.35.2"));
    assert_eq!(api_version(&w, &cp1).as_deref(), Some("v1.35.2"));
    // API servers one minor apart are fine. kubeadm >= 1.33 points a control plane's kubelet at
    // its own API server (ControlPlaneKubeletLocalMode, on by default, GA in 1.35, the gate gone in
    // 1.36): cp-2's 1.36 kubelet talks to its 1.36 API server, not to the 1.35 ones
    // (kubernetes/kubernetes#127316); cp-1's still runs next to a 1.35 one.
    let violations: Vec<String> = w.guest.skew_violations(cid(&w)).into_iter().collect();
    assert_eq!(
        violations,
        ["kubelet v1.36.0 of kos-demo-cp-1 is newer than kube-apiserver v1.35.2 on kos-demo-cp-1"],
    );
    // The old control planes go (as a roll removes them): nothing is newer than what runs.
    w.event(&cp0, kos_guest::ServerEvent::Shutdown);
    w.event(&cp1, kos_guest::ServerEvent::Shutdown);
    assert_eq!(
        w.guest.skew_violations(cid(&w)),
        Default::default(),
        "only cp-2 runs an API server"
    );
}

/// ControlPlaneKubeletLocalMode as each kubeadm knows it: on by default from 1.33, its gate gone
/// in 1.36, where a ClusterConfiguration still naming it fails the join ("unrecognized
/// feature-gate key", kubeadm refuses unknown gates); kos sets no gate.
#[tokio::test]
async fn a_control_planes_kubelet_talks_to_its_own_api_server_and_1_36_refuses_the_old_gate() {
    let s = day_long_secrets();
    let mut w = formed("1.36.0", 3, 0, &s);
    let cp1 = w.boot(
        "cp-1",
        true,
        user_data(&cluster("1.36.0", 3, 0), Role::JoinControlPlane, &s),
    );
    w.settle_hours(2);
    assert_eq!(
        w.markers(&cp1),
        join_markers(),
        "{:?}",
        w.failure_details(&cp1)
    );
    let conf = w
        .guest
        .vfs(&cp1)
        .unwrap()
        .text("/etc/kubernetes/kubelet.conf")
        .unwrap()
        .to_owned();
    assert!(
        conf.contains("server: https://10.0.0."),
        "its own address: {conf}"
    );
    assert_eq!(w.guest.skew_violations(cid(&w)), Default::default());

    edit_cluster_configuration(&w, |t| {
        format!("{t}featureGates:\n  ControlPlaneKubeletLocalMode: true\n")
    });
    let cp2 = w.boot(
        "cp-2",
        true,
        user_data(&cluster("1.36.0", 3, 0), Role::JoinControlPlane, &s),
    );
    w.settle_hours(2);
    let details = format!("{:?}", w.failure_details(&cp2));
    assert!(
        details.contains("unrecognized feature-gate key: ControlPlaneKubeletLocalMode"),
        "{details}"
    );
}

#[tokio::test]
async fn a_worker_newer_than_every_api_server_joins_and_breaks_the_skew_policy() {
    let s = day_long_secrets();
    let mut w = formed("1.34.2", 1, 1, &s);
    // kubeadm's join preflight runs KubeletVersionCheck with no control plane version: the
    // 1.35 kubelet joins the 1.34 cluster.
    let newer = cluster("1.35.0", 1, 1);
    let id = w.boot("w-0", false, user_data(&newer, Role::Worker, &s));
    w.settle_hours(2);
    assert_eq!(
        w.markers(&id),
        join_markers(),
        "{:?}",
        w.failure_details(&id)
    );
    assert_eq!(api_version(&w, &id), None);
    let violations: Vec<String> = w.guest.skew_violations(cid(&w)).into_iter().collect();
    assert_eq!(
        violations,
        [
            "kubelet v1.35.0 of kos-demo-w-0 is newer than kube-apiserver v1.34.2 on kos-demo-cp-0 (through the control-plane endpoint)"
        ]
    );
}

#[tokio::test]
async fn a_cluster_two_minors_older_than_kubeadm_is_refused_for_workers_and_control_planes() {
    let s = day_long_secrets();
    let mut w = formed("1.34.2", 3, 1, &s);
    for (name, cp, role) in [
        ("w-0", false, Role::Worker),
        ("cp-1", true, Role::JoinControlPlane),
    ] {
        let id = w.boot(name, cp, user_data(&cluster("1.36.0", 3, 1), role, &s));
        w.settle_hours(2);
        assert_join_failed(&w, &id);
        let details = w.failure_details(&id);
        assert!(
            details.iter().any(|d| d.contains(
                "unable to fetch the kubeadm-config ConfigMap: this version of kubeadm only supports deploying clusters with the control plane version >= v1.35.0. Current version: v1.34.2"
            )),
            "{details:?}"
        );
    }
}

#[tokio::test]
async fn an_older_kubeadm_deploys_the_newer_control_plane_kubeadm_config_names() {
    let s = day_long_secrets();
    let mut w = formed("1.35.0", 3, 0, &s);
    // kubeadm 1.34 and a 1.35 ClusterConfiguration: KubernetesVersionCheck only warns.
    let older = cluster("1.34.2", 3, 0);
    let id = w.boot("cp-1", true, user_data(&older, Role::JoinControlPlane, &s));
    w.settle_hours(2);
    assert_eq!(
        w.markers(&id),
        join_markers(),
        "{:?}",
        w.failure_details(&id)
    );
    assert_eq!(api_version(&w, &id).as_deref(), Some("v1.35.0"));
    assert_eq!(w.guest.skew_violations(cid(&w)), Default::default());
}

#[tokio::test]
async fn api_servers_two_minors_apart_are_a_violation() {
    let s = day_long_secrets();
    let mut w = formed("1.34.2", 3, 0, &s);
    // A client jumps the ConfigMap two minors; kubeadm 1.36 accepts a 1.36 configuration.
    set_version(&w, "v1.34.2", "v1.36.0");
    let cp1 = w.boot(
        "cp-1",
        true,
        user_data(&cluster("1.36.0", 3, 0), Role::JoinControlPlane, &s),
    );
    w.settle_hours(2);
    assert_eq!(
        w.markers(&cp1),
        join_markers(),
        "{:?}",
        w.failure_details(&cp1)
    );
    let violations = w.guest.skew_violations(cid(&w));
    assert!(
        violations.contains(
            "kube-apiservers more than one minor apart: v1.34.2 on kos-demo-cp-0 and v1.36.0 on kos-demo-cp-1"
        ),
        "{violations:?}"
    );
}

#[tokio::test]
async fn a_damaged_kubeadm_config_fails_the_next_join_as_kubeadm_reads_it() {
    let s = day_long_secrets();
    let mut w = formed("1.35.2", 3, 0, &s);
    edit_cluster_configuration(&w, |t| t.replace("kubernetesVersion", "kubernetesVerison"));
    let id = w.boot(
        "cp-1",
        true,
        user_data(&cluster("1.35.2", 3, 0), Role::JoinControlPlane, &s),
    );
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    let details = w.failure_details(&id);
    assert!(
        details.iter().any(|d| d.contains(
            "unable to fetch the kubeadm-config ConfigMap: failed to decode cluster configuration data: unknown field \"kubernetesVerison\""
        )),
        "{details:?}"
    );
}
