//! Encryption at rest through the guest: kubeadm puts `apiServer.extraArgs` and `extraVolumes` into
//! the API server's static pod (a joining control plane takes them from `kubeadm-config`), and the
//! API server reads the file through its hostPath volume, as strictly as kube-apiserver does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kos_bootstrap::encryption::{CONFIG_PATH, Provider};
use kos_bootstrap::{Encryption, EncryptionKey, PkiDelivery, Role};
use kos_guest::static_pods::apiserver_encryption;
use rand::SeedableRng;

fn encrypted(control_planes: u32) -> (kos_bootstrap::ClusterInput, EncryptionKey) {
    let key = EncryptionKey::generate(&mut rand::rngs::StdRng::seed_from_u64(3), 1);
    let mut c = cluster("1.35.0", control_planes, 0);
    c.pki_delivery = PkiDelivery::UploadCerts;
    c.encryption = Some(Encryption {
        providers: vec![Provider::Secretbox(vec![key.clone()]), Provider::Identity],
    });
    (c, key)
}

#[tokio::test]
async fn every_control_planes_api_server_runs_with_the_file_through_its_volume() {
    let (c, _) = encrypted(2);
    let s = secrets();
    let mut w = World::new();
    let cp0 = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let cp1 = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(1);
    assert_eq!(
        w.markers(&cp1),
        join_markers(),
        "{:?}",
        w.failure_details(&cp1)
    );
    let uploaded = w.only_cluster().cluster_configuration().unwrap().unwrap();
    assert_eq!(
        uploaded.api_server_args,
        [(
            "encryption-provider-config".to_owned(),
            CONFIG_PATH.to_owned()
        )]
    );
    assert_eq!(uploaded.api_server_volumes.len(), 1);
    for cp in [&cp0, &cp1] {
        let config = apiserver_encryption(w.guest.vfs(cp).unwrap()).unwrap();
        assert_eq!(config.key_names("secrets"), ["key-1", "identity"]);
    }
}

#[tokio::test]
async fn a_file_kube_apiserver_refuses_fails_kubeadm_init() {
    let (c, key) = encrypted(1);
    let s = secrets();
    let short = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [1u8; 16]);
    let text = user_data_text(&c, Role::InitControlPlane, &s).replace(key.secret.expose(), &short);
    let mut w = World::new();
    let cp = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    let last = w.markers(&cp).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("kos-bootstrap: kubeadm-init failed"),
        "{last}"
    );
    let details = w.failure_details(&cp).join("\n");
    assert!(
        details.contains("secret is not of the expected length, got 16, expected one of [32]"),
        "{details}"
    );
}

#[tokio::test]
async fn without_the_volume_the_api_server_cannot_see_the_file() {
    let (c, _) = encrypted(1);
    let s = secrets();
    // The flag without the volume: the file is on the host, not in the container.
    let text = user_data_text(&c, Role::InitControlPlane, &s).replace(
        "mountPath: /etc/kubernetes/enc",
        "mountPath: /etc/kubernetes/elsewhere",
    );
    let mut w = World::new();
    let cp = w.boot("cp-0", true, text.into_bytes());
    w.settle_hours(1);
    let details = w.failure_details(&cp).join("\n");
    assert!(
        details
            .contains("open /etc/kubernetes/enc/encryption-config.yaml: no such file or directory"),
        "{details}"
    );
}
