//! Encryption at rest in the rendered bootstrap: every control plane writes the upstream
//! EncryptionConfiguration, the first one's ClusterConfiguration hands it to kube-apiserver, and
//! no worker's user_data holds the key.
#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use common::*;
use kos_bootstrap::cloud_init::render_user_data;
use kos_bootstrap::encryption::{CONFIG_PATH, Provider};
use kos_bootstrap::kubeadm::{Documents, documents};
use kos_bootstrap::*;
use rand::SeedableRng;

fn encrypted() -> (ClusterInput, EncryptionKey) {
    let key = EncryptionKey::generate(&mut rand::rngs::StdRng::seed_from_u64(7), 1);
    let mut c = cluster("1.35.2", 3, 2);
    c.pki_delivery = PkiDelivery::UploadCerts;
    c.encryption = Some(Encryption {
        providers: vec![Provider::Secretbox(vec![key.clone()]), Provider::Identity],
    });
    (c, key)
}

fn file(c: &ClusterInput, role: Role, path: &str) -> Option<String> {
    render_user_data(c, &node(role), &secrets())
        .unwrap()
        .files
        .iter()
        .find(|f| f.path == path)
        .map(|f| f.content.expose().to_owned())
}

#[test]
fn every_control_plane_writes_the_configuration() {
    let (c, key) = encrypted();
    for role in [Role::InitControlPlane, Role::JoinControlPlane] {
        let ud = render_user_data(&c, &node(role), &secrets()).unwrap();
        let f = ud.files.iter().find(|f| f.path == CONFIG_PATH).unwrap();
        assert_eq!(f.permissions, "0600");
        let doc: serde_json::Value = serde_saphyr::from_str(f.content.expose()).unwrap();
        assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(doc["kind"], "EncryptionConfiguration");
        let k = &doc["resources"][0]["providers"][0]["secretbox"]["keys"][0];
        assert_eq!(k["name"], "key-1");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(k["secret"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes.len(), 32);
        assert_eq!(k["secret"], key.secret.expose());
        assert!(ud.text.expose().contains(key.secret.expose()));
        assert!(!format!("{ud:?}").contains(key.secret.expose()));
    }
}

#[test]
fn no_worker_gets_the_key() {
    let (c, key) = encrypted();
    let ud = render_user_data(&c, &node(Role::Worker), &secrets()).unwrap();
    assert!(!ud.text.expose().contains(key.secret.expose()));
    assert!(!ud.text.expose().contains("EncryptionConfiguration"));
    assert!(ud.files.iter().all(|f| f.path != CONFIG_PATH));
    assert!(file(&c, Role::Worker, "/etc/kos/kubeadm.yaml").is_some());
}

#[test]
fn the_first_control_plane_hands_the_file_to_kube_apiserver() {
    let (c, _) = encrypted();
    let Documents::Init { cluster, .. } =
        documents(&c, &node(Role::InitControlPlane), &secrets()).unwrap()
    else {
        panic!("init documents")
    };
    let api = &cluster.api_server;
    assert_eq!(api.extra_args.len(), 1);
    assert_eq!(api.extra_args[0].name, "encryption-provider-config");
    assert_eq!(api.extra_args[0].value, CONFIG_PATH);
    assert_eq!(api.extra_volumes.len(), 1);
    let v = &api.extra_volumes[0];
    assert!(CONFIG_PATH.starts_with(&format!("{}/", v.host_path)));
    assert_eq!(v.mount_path, v.host_path);
    assert!(v.read_only);
    assert_eq!(v.path_type, "DirectoryOrCreate");
    // The rendered YAML parses back strictly, list-shaped extraArgs included.
    let yaml = render_kubeadm(&c, &node(Role::InitControlPlane), &secrets()).unwrap();
    assert!(yaml.expose().contains("- name: encryption-provider-config"));
    assert_eq!(
        Documents::parse(yaml.expose()).unwrap(),
        documents(&c, &node(Role::InitControlPlane), &secrets()).unwrap()
    );
    // Without encryption, nothing of it.
    let plain = cluster_of(None);
    assert!(!plain.contains("encryption-provider-config"), "{plain}");
}

fn cluster_of(enc: Option<Encryption>) -> String {
    let mut c = cluster("1.35.2", 1, 0);
    c.encryption = enc;
    render_kubeadm(&c, &node(Role::InitControlPlane), &secrets())
        .unwrap()
        .expose()
        .to_owned()
}
