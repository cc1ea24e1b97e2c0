//! kos's etcd client against a small TLS server of this test speaking the gateway's JSON: the etcd CA
//! verifies the server for `localhost`, the server demands a client certificate of the same CA, members
//! are listed and removed, and a removal a stopped run already made counts as done.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use kos_bootstrap::ClusterSecrets;
use kos_lifecycle::etcd::{Dial, EtcdClient, EtcdError, EtcdTls, MemberId, Step};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Tcp(u16);

impl Dial for Tcp {
    type Stream = TcpStream;
    async fn dial(&self) -> Result<TcpStream, EtcdError> {
        TcpStream::connect(("127.0.0.1", self.0))
            .await
            .map_err(|e| {
                EtcdError::transport(
                    Step::Dial {
                        target: format!("127.0.0.1:{}", self.0),
                    },
                    e,
                )
            })
    }
}

fn secrets() -> ClusterSecrets {
    ClusterSecrets::generate(
        &mut rand::rng(),
        time::OffsetDateTime::now_utc(),
        std::time::Duration::from_secs(3600),
    )
    .unwrap()
}

/// A serving certificate for `names` signed by the etcd CA, as kubeadm issues etcd's.
fn serving(s: &ClusterSecrets, names: &[&str]) -> (String, String) {
    let ca_key = rcgen::KeyPair::from_pem(s.etcd_ca.key_pem.expose()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&s.etcd_ca.cert_pem, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    p.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = p.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[derive(Default)]
struct Etcd {
    /// (id, name)
    members: Vec<(u64, String)>,
    /// The paths asked, in order.
    paths: Vec<String>,
    /// Refuse removals as etcd does without a healthy cluster.
    unhealthy: bool,
}

fn answer(path: &str, body: &str, etcd: &Mutex<Etcd>) -> (&'static str, String) {
    let mut e = etcd.lock().unwrap();
    e.paths.push(path.to_owned());
    match path {
        "/v3/cluster/member/list" => {
            let members: Vec<_> = e
                .members
                .iter()
                .map(|(id, name)| {
                    serde_json::json!({"ID": id.to_string(), "name": name,
                        "peerURLs": [format!("https://{name}:2380")], "clientURLs": [format!("https://{name}:2379")]})
                })
                .collect();
            (
                "200 OK",
                serde_json::json!({"header": {"member_id": "1"}, "members": members}).to_string(),
            )
        }
        "/v3/maintenance/status" => (
            "200 OK",
            r#"{"header":{"member_id":"1"},"leader":"1","raftIndex":"42","errors":[],"isLearner":false}"#.into(),
        ),
        "/v3/cluster/member/remove" => {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let id: u64 = v["ID"].as_str().unwrap().parse().unwrap();
            if e.unhealthy {
                return (
                    "503 Service Unavailable",
                    r#"{"error":"etcdserver: unhealthy cluster","code":14,"message":"etcdserver: unhealthy cluster"}"#.into(),
                );
            }
            let before = e.members.len();
            e.members.retain(|(m, _)| *m != id);
            if e.members.len() == before {
                (
                    "404 Not Found",
                    r#"{"error":"etcdserver: member not found","code":5,"message":"etcdserver: member not found"}"#.into(),
                )
            } else {
                ("200 OK", r#"{"header":{},"members":[]}"#.into())
            }
        }
        _ => ("404 Not Found", r#"{"code":5,"message":"Not Found"}"#.into()),
    }
}

/// Serves on 127.0.0.1 with `cert`, demanding client certificates of `client_ca`; answers chunked.
async fn serve(cert: (String, String), client_ca: &str, etcd: Arc<Mutex<Etcd>>) -> u16 {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.0.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, etcd) = (acceptor.clone(), etcd.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                let path = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let (status, json) = answer(&path, &body, &etcd);
                // Two chunks, as Go's net/http sends an answer it did not size.
                let (a, b) = json.split_at(json.len() / 2);
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    a.len(),
                    b.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test]
async fn lists_and_removes_members_and_a_repeated_removal_is_done() {
    let s = secrets();
    let etcd = Arc::new(Mutex::new(Etcd {
        members: vec![
            (10_276_657_743_932_975_437, "cp-0".into()),
            (2, "cp-1".into()),
            (3, "cp-2".into()),
        ],
        ..Etcd::default()
    }));
    let port = serve(
        serving(&s, &["localhost"]),
        &s.etcd_ca.cert_pem,
        etcd.clone(),
    )
    .await;
    let tls = EtcdTls::for_cluster(&s, time::OffsetDateTime::now_utc()).unwrap();
    let client = EtcdClient::new(Tcp(port), tls);

    let members = client.member_list().await.unwrap();
    let names: Vec<_> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["cp-0", "cp-1", "cp-2"]);
    assert_eq!(members[0].id, MemberId(10_276_657_743_932_975_437));
    let status = client.status().await.unwrap();
    assert_eq!(status.leader, MemberId(1));

    client.member_remove(members[0].id).await.unwrap();
    assert_eq!(etcd.lock().unwrap().members.len(), 2);
    // A run stopped after the removal removes it again: done, not an error.
    client.member_remove(members[0].id).await.unwrap();
    assert_eq!(client.member_list().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_server_not_certified_for_localhost_by_the_etcd_ca_is_refused() {
    let s = secrets();
    let etcd = Arc::new(Mutex::new(Etcd::default()));
    let tls = EtcdTls::for_cluster(&s, time::OffsetDateTime::now_utc()).unwrap();
    // Another name.
    let port = serve(
        serving(&s, &["etcd.example"]),
        &s.etcd_ca.cert_pem,
        etcd.clone(),
    )
    .await;
    let e = EtcdClient::new(Tcp(port), tls.clone())
        .member_list()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            EtcdError::Transport {
                what: Step::Tls,
                ..
            }
        ),
        "{e}"
    );
    // Another CA.
    let other = secrets();
    let port = serve(
        serving(&other, &["localhost"]),
        &s.etcd_ca.cert_pem,
        etcd.clone(),
    )
    .await;
    let e = EtcdClient::new(Tcp(port), tls)
        .member_list()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            EtcdError::Transport {
                what: Step::Tls,
                ..
            }
        ),
        "{e}"
    );
    assert!(etcd.lock().unwrap().paths.is_empty(), "nothing was asked");
}

#[tokio::test]
async fn the_server_refuses_a_client_of_another_etcd_ca() {
    let s = secrets();
    let other = secrets();
    let etcd = Arc::new(Mutex::new(Etcd::default()));
    let port = serve(
        serving(&s, &["localhost"]),
        &s.etcd_ca.cert_pem,
        etcd.clone(),
    )
    .await;
    // Trusts the right CA, but presents a certificate of another.
    let (cert, key) = kos_bootstrap::pki::sign_client(
        &mut rand::rng(),
        &other.etcd_ca,
        kos_bootstrap::pki::CaKind::Etcd,
        "kos-etcd-client",
        &[],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let tls = EtcdTls::new(&s.etcd_ca.cert_pem, &cert, key.expose()).unwrap();
    let e = EtcdClient::new(Tcp(port), tls)
        .member_list()
        .await
        .unwrap_err();
    assert!(matches!(e, EtcdError::Transport { .. }), "{e}");
    assert!(etcd.lock().unwrap().paths.is_empty());
}

#[tokio::test]
async fn a_refused_removal_names_the_call_and_etcds_message() {
    let s = secrets();
    let etcd = Arc::new(Mutex::new(Etcd {
        members: vec![(1, "cp-0".into()), (2, "cp-1".into())],
        unhealthy: true,
        ..Etcd::default()
    }));
    let port = serve(
        serving(&s, &["localhost"]),
        &s.etcd_ca.cert_pem,
        etcd.clone(),
    )
    .await;
    let tls = EtcdTls::for_cluster(&s, time::OffsetDateTime::now_utc()).unwrap();
    let e = EtcdClient::new(Tcp(port), tls)
        .member_remove(MemberId(2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            EtcdError::Api {
                path: "/v3/cluster/member/remove",
                status: 503,
                message,
            } if message == "etcdserver: unhealthy cluster"
        ),
        "{e:?}"
    );
    assert_eq!(etcd.lock().unwrap().members.len(), 2);
}

/// A stream whose far end never answers (a port-forward to a hung kubelet or member): held open,
/// silent.
struct Silent(Mutex<Vec<tokio::io::DuplexStream>>);

impl Dial for Silent {
    type Stream = tokio::io::DuplexStream;
    async fn dial(&self) -> Result<tokio::io::DuplexStream, EtcdError> {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        self.0.lock().unwrap().push(theirs);
        Ok(ours)
    }
}

/// A member that never answers fails the call, naming it, instead of holding the run forever (the
/// client had no bound, and a silent port-forward would have stopped `kos up` for good).
#[tokio::test]
async fn a_member_that_never_answers_fails_the_call() {
    let s = secrets();
    let tls = EtcdTls::for_cluster(&s, time::OffsetDateTime::now_utc()).unwrap();
    let client = EtcdClient::new(Silent(Mutex::new(Vec::new())), tls)
        .with_timeout(std::time::Duration::from_millis(200));
    match client.member_list().await {
        Err(e @ EtcdError::Transport { .. }) => {
            assert!(
                matches!(
                    &e,
                    EtcdError::Transport {
                        what: Step::Timeout {
                            path: "/v3/cluster/member/list",
                            ..
                        },
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(
                e.to_string()
                    .contains("/v3/cluster/member/list: no answer within"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}
