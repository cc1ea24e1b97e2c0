//! The client against kos-kube-fake served over TLS as a kubeadm-made API server is (serving
//! certificate and client certificates of the cluster CA, kubeadm's admin binding): the errors
//! callers branch on as the server answers them, and the TLS rules (the cluster CA only, the
//! endpoint's name verified through a local forwarder).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use kos_kube_fake::{FakeKube, TlsFront, TlsServing};
use kos_lifecycle::api::ApiError;
use serde_json::json;

use super::error::gone_is_fine;
use super::*;

pub(crate) fn secrets() -> ClusterSecrets {
    ClusterSecrets::generate(
        &mut rand::rng(),
        time::OffsetDateTime::now_utc(),
        kos_bootstrap::DEFAULT_TOKEN_TTL,
    )
    .expect("secrets")
}

/// A serving certificate for `names` (IP addresses or DNS names) signed by `ca` (PEM cert, key).
pub(crate) fn serving_cert(ca: &kos_bootstrap::pki::CaPair, names: &[&str]) -> (String, String) {
    let ca_key = rcgen::KeyPair::from_pem(ca.key_pem.expose()).expect("ca key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.subject_alt_names = names
        .iter()
        .map(|n| match n.parse() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName((*n).try_into().expect("dns name")),
        })
        .collect();
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// kos-kube-fake with kubeadm's binding of the admin group (1.29+), served over TLS with a serving
/// certificate of `serving_ca` for `names`, accepting clients of `client_ca`.
pub(crate) fn serve(
    fake: &FakeKube,
    serving_ca: &ClusterSecrets,
    names: &[&str],
    client_ca: &ClusterSecrets,
) -> TlsFront {
    let admins: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubeadm:cluster-admins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"}],
    }))
    .expect("binding");
    // A second front on the same fake finds the binding there.
    let _ = fake.insert(&admins);
    let (cert, key) = serving_cert(&serving_ca.ca, names);
    fake.serve_tls(&TlsServing {
        cert_chain_pem: cert,
        key_pem: key,
        client_ca_pem: client_ca.ca.cert_pem.clone(),
    })
    .expect("tls")
}

pub(crate) fn version() -> KubeVersion {
    "1.36.4".parse().expect("version")
}

/// A client of the API at 127.0.0.1:`port`.
pub(crate) fn direct(port: u16, secrets: &ClusterSecrets) -> Kube {
    Kube::connect(
        &ApiEndpoint {
            host: "127.0.0.1".into(),
            port,
        },
        None,
        &version(),
        secrets,
    )
    .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_told_apart_as_the_server_gives_them() {
    let s = secrets();
    let fake = FakeKube::start().await.expect("fake");
    let front = serve(&fake, &s, &["127.0.0.1"], &s);
    let kube = direct(front.addr().port(), &s);
    assert!(kube.readyz().await.unwrap());

    // 404: a typed NotFound; `get_opt` makes it None, a delete of it is done.
    let missing = "/api/v1/nodes/nowhere";
    let e = kube.get(missing).await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.to_string(), "GET /api/v1/nodes/nowhere: not found");
    assert!(matches!(ApiError::from(e), ApiError::NotFound));
    assert!(kube.get_opt(missing).await.unwrap().is_none());
    let e = kube.delete(missing).await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    gone_is_fine(kube.delete(missing).await).unwrap();

    // 409: creating what exists, and writing over a newer version.
    let secrets_path = "/api/v1/namespaces/kube-system/secrets";
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "kube-system"}, "data": {"k": "dmFsdWU="}});
    let created = kube.post(secrets_path, &secret).await.unwrap();
    assert_eq!(created["metadata"]["name"], "s");
    let e = kube.post(secrets_path, &secret).await.unwrap_err();
    let KubeError::Conflict { message, .. } = &e else {
        panic!("{e}")
    };
    assert!(message.contains("already exists"), "{message}");
    assert!(matches!(ApiError::from(e), ApiError::Conflict { .. }));
    let path = format!("{secrets_path}/s");
    kube.merge_patch(&path, &json!({"data": {"k": "bmV3"}}))
        .await
        .unwrap();
    let e = kube.put(&path, &created).await.unwrap_err();
    assert!(matches!(e, KubeError::Conflict { .. }), "{e}");
    // Read again, written again: the current version goes through.
    let fresh = kube.get(&path).await.unwrap();
    kube.put(&path, &fresh).await.unwrap();
    // No error text holds the Secret's data.
    assert!(!format!("{e} {e:?}").contains("dmFsdWU="));

    // Another status keeps the server's reason and message.
    let e = kube
        .post(secrets_path, &json!({"apiVersion": "v1", "kind": "Secret"}))
        .await
        .unwrap_err();
    let KubeError::Status { code, reason, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!((*code, reason.as_str()), (422, "Invalid"), "{e}");
    assert!(matches!(
        ApiError::from(e),
        ApiError::Status { code: 422, .. }
    ));

    // A not-ready API server: `/readyz` answers, and says no.
    front.set_ready(false);
    assert!(!kube.readyz().await.unwrap());
}

/// The cluster CA is trusted and nothing else: a server whose certificate another CA signed is
/// never talked to, and one that does not accept kos's client certificate refuses it. Through a
/// local forwarder the certificate is verified for the endpoint's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_cluster_ca_is_trusted_and_the_endpoints_name_is_verified() {
    let ours = secrets();
    let other = secrets();
    let fake = FakeKube::start().await.expect("fake");

    let theirs = serve(&fake, &other, &["127.0.0.1"], &ours);
    let e = direct(theirs.addr().port(), &ours)
        .readyz()
        .await
        .unwrap_err();
    assert!(matches!(e, KubeError::Transport { .. }), "{e}");
    assert!(matches!(ApiError::from(e), ApiError::Unreachable(_)));

    // A server that does not know kos's client certificate takes it as anonymous, as
    // kube-apiserver does (it asks for a client certificate without requiring one): 401.
    let refusing = serve(&fake, &ours, &["127.0.0.1"], &other);
    let e = direct(refusing.addr().port(), &ours)
        .get("/api/v1/nodes")
        .await
        .unwrap_err();
    assert!(matches!(e, KubeError::Status { code: 401, .. }), "{e}");

    // A simulated cloud forwards the endpoint 10.0.0.5 from a local address: the serving
    // certificate names 10.0.0.5 (and api.example), not 127.0.0.1.
    let named = serve(&fake, &ours, &["10.0.0.5", "api.example"], &ours);
    let via = |host: &str| {
        Kube::connect(
            &ApiEndpoint {
                host: host.into(),
                port: 6443,
            },
            Some(named.addr()),
            &version(),
            &ours,
        )
        .expect("client")
    };
    assert!(via("10.0.0.5").readyz().await.unwrap());
    assert!(via("api.example").readyz().await.unwrap());
    assert!(matches!(
        via("10.0.0.6").readyz().await,
        Err(KubeError::Transport { .. })
    ));
    // Connecting to the forwarder directly: its certificate does not name 127.0.0.1.
    assert!(matches!(
        direct(named.addr().port(), &ours).readyz().await,
        Err(KubeError::Transport { .. })
    ));

    // Nothing listens: no answer.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    assert!(matches!(
        direct(closed, &ours).readyz().await,
        Err(KubeError::Transport { .. })
    ));
}

/// Through an HTTP proxy (`HTTPS_PROXY`), the client asks for a CONNECT tunnel to the endpoint's
/// name and port, and the TLS rules hold inside it: the API answers, its name verified. The old
/// reqwest client honoured the proxy; kube-rs's does only when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_is_asked_for_a_tunnel_to_the_endpoint() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = secrets();
    let fake = FakeKube::start().await.expect("fake");
    let front = serve(&fake, &s, &["kube.example"], &s);
    let api = front.addr();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let asked_tx = asked_tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let _ = asked_tx.send(line);
                // The name only this proxy resolves: the API's front.
                let Ok(mut upstream) = tokio::net::TcpStream::connect(api).await else {
                    return;
                };
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    let endpoint = ApiEndpoint {
        host: "kube.example".into(),
        port: api.port(),
    };
    let kube = Kube::connect_through(
        &endpoint,
        None,
        &version(),
        &s,
        Some(&format!("http://{proxy}")),
    )
    .expect("client");
    assert!(kube.readyz().await.unwrap());
    assert_eq!(
        asked.recv().await.as_deref(),
        Some(format!("CONNECT kube.example:{} HTTP/1.1", api.port()).as_str())
    );
}
