//! The API phase of `kos up` against a fake API server over real TLS: the server's certificate is
//! signed by the cluster CA and it demands a client certificate signed by the same CA, as
//! kube-apiserver does. Proves that [`Kube`] trusts the cluster CA only, authenticates with the admin
//! certificate it signs offline, and that [`api`](super::api) waits for `/readyz` and for
//! every node Ready and initialised, or says what is missing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ApiPhase, Timing, api};
use crate::kube::{Kube, KubeError, UNINITIALIZED};
use crate::report::{Recorded, Silent};

/// A change of what the fake API answers.
type Step = Box<dyn FnOnce(&mut State) + Send>;

/// What the fake API answers; `script` moves it on after each `/api/v1/nodes`.
#[derive(Default)]
struct State {
    readyz: bool,
    /// (name, Ready, uninitialized)
    nodes: Vec<(String, bool, bool)>,
    script: Vec<Step>,
}

fn secrets() -> ClusterSecrets {
    ClusterSecrets::generate(
        &mut rand::rng(),
        time::OffsetDateTime::now_utc(),
        kos_bootstrap::DEFAULT_TOKEN_TTL,
    )
    .expect("secrets")
}

/// A serving certificate for 127.0.0.1 signed by `ca` (PEM cert and key).
fn serving_cert(ca: &kos_bootstrap::pki::CaPair) -> (String, String) {
    let ca_key = rcgen::KeyPair::from_pem(ca.key_pem.expose()).expect("ca key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    p.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip"))];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// Serves `state` over TLS on 127.0.0.1 with `cert`, verifying clients against `client_ca`.
async fn serve(cert: (String, String), client_ca: &str, state: Arc<Mutex<State>>) -> u16 {
    let certs = vec![CertificateDer::from_pem_slice(cert.0.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).expect("key");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.as_bytes()).expect("ca"))
        .expect("root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("verifier");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, state) = (acceptor.clone(), state.clone());
            tokio::spawn(async move {
                // A client that does not present a cluster-signed certificate fails here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).to_string();
                let path = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let (status, body) = answer(&path, &state);
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn answer(path: &str, state: &Mutex<State>) -> (&'static str, String) {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    match path {
        "/readyz" if s.readyz => ("200 OK", "ok".into()),
        "/readyz" => ("500 Internal Server Error", "[-]etcd failed".into()),
        "/api/v1/nodes" => {
            let items: Vec<serde_json::Value> = s
                .nodes
                .iter()
                .map(|(name, ready, uninit)| {
                    let taints = if *uninit {
                        serde_json::json!([{"key": UNINITIALIZED, "effect": "NoSchedule"}])
                    } else {
                        serde_json::json!([])
                    };
                    // A node named `*-dead` has a kubelet that stopped posting.
                    let status = match (*ready, name.ends_with("-dead")) {
                        (true, _) => "True",
                        (false, true) => "Unknown",
                        (false, false) => "False",
                    };
                    serde_json::json!({
                        "metadata": {"name": name},
                        "spec": {"taints": taints},
                        "status": {"conditions": [{"type": "Ready", "status": status}]},
                    })
                })
                .collect();
            if !s.script.is_empty() {
                let next = s.script.remove(0);
                next(&mut s);
            }
            ("200 OK", serde_json::json!({"items": items}).to_string())
        }
        _ => ("404 Not Found", "{}".into()),
    }
}

fn kube(port: u16, secrets: &ClusterSecrets) -> Kube {
    let version: KubeVersion = "1.36.4".parse().expect("version");
    Kube::connect(
        &ApiEndpoint {
            host: "127.0.0.1".into(),
            port,
        },
        None,
        &version,
        secrets,
    )
    .expect("client")
}

fn timing(deadline: Duration) -> Timing {
    Timing {
        poll: Duration::from_millis(20),
        max_poll: Duration::from_millis(20),
        deadline,
        cloud: None,
    }
}

fn nodes(list: &[(&str, bool, bool)]) -> Vec<(String, bool, bool)> {
    list.iter()
        .map(|(n, r, u)| ((*n).to_owned(), *r, *u))
        .collect()
}

#[tokio::test]
async fn waits_for_readyz_then_every_node_ready_and_initialised() {
    let s = secrets();
    let state = Arc::new(Mutex::new(State {
        readyz: true,
        nodes: nodes(&[("cp-0", false, true)]),
        script: vec![
            Box::new(|s: &mut State| {
                s.nodes = nodes(&[("cp-0", true, true), ("w-0", false, true)])
            }),
            Box::new(|s: &mut State| {
                s.nodes = nodes(&[("cp-0", true, false), ("w-0", true, true)])
            }),
            Box::new(|s: &mut State| {
                s.nodes = nodes(&[("cp-0", true, false), ("w-0", true, false)])
            }),
        ],
    }));
    let port = serve(serving_cert(&s.ca), &s.ca.cert_pem, state).await;
    let k = kube(port, &s);
    let seen = Recorded::default();
    let phase = api(
        &k,
        2,
        &BTreeSet::new(),
        &timing(Duration::from_secs(60)),
        Duration::from_secs(30),
        &seen,
    )
    .await
    .expect("ready");
    assert_eq!(phase, ApiPhase::Ready { nodes: 2 });
    // Each change of the nodes' summary is reported once, the last one the ready cluster.
    let events = seen.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some(r#"Nodes { summary: "2/2 node(s) Ready" }"#),
        "{events:?}"
    );
    let mut unique = events.clone();
    unique.dedup();
    assert_eq!(unique, events);
}

#[tokio::test]
async fn a_cluster_that_never_gets_ready_says_what_is_missing() {
    let s = secrets();
    let state = Arc::new(Mutex::new(State {
        readyz: true,
        nodes: nodes(&[("cp-0", true, false), ("w-0", true, true)]),
        script: Vec::new(),
    }));
    let port = serve(serving_cert(&s.ca), &s.ca.cert_pem, state).await;
    let e = api(
        &kube(port, &s),
        2,
        &BTreeSet::new(),
        &timing(Duration::from_millis(400)),
        Duration::from_secs(30),
        &Silent,
    )
    .await
    .expect_err("never ready");
    assert!(
        e.last
            .contains("waiting for the cloud controller to initialise w-0"),
        "{e}"
    );
}

/// `Kube` trusts the cluster CA only: an API presenting another CA's certificate is never talked
/// to (reported as not reachable), and the API refuses a client without the cluster's certificate.
#[tokio::test]
async fn only_the_cluster_ca_is_trusted_both_ways() {
    let ours = secrets();
    let other = secrets();
    let state = || {
        Arc::new(Mutex::new(State {
            readyz: true,
            nodes: nodes(&[("cp-0", true, false)]),
            script: Vec::new(),
        }))
    };
    // The server's certificate is another cluster's.
    let port = serve(serving_cert(&other.ca), &ours.ca.cert_pem, state()).await;
    let phase = api(
        &kube(port, &ours),
        1,
        &BTreeSet::new(),
        &timing(Duration::from_secs(60)),
        Duration::from_millis(200),
        &Silent,
    )
    .await
    .expect("skipped");
    assert!(
        matches!(&phase, ApiPhase::Skipped(why) if why.contains("not reachable")),
        "{phase:?}"
    );
    // The server only accepts the other cluster's clients.
    let port = serve(serving_cert(&ours.ca), &other.ca.cert_pem, state()).await;
    assert!(matches!(
        kube(port, &ours).readyz().await,
        Err(KubeError::Transport { .. })
    ));
    // Nothing listens: a private endpoint.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let phase = api(
        &kube(closed, &ours),
        1,
        &BTreeSet::new(),
        &timing(Duration::from_secs(60)),
        Duration::from_millis(200),
        &Silent,
    )
    .await
    .expect("skipped");
    assert!(matches!(phase, ApiPhase::Skipped(_)), "{phase:?}");
}

/// The wait for 3 nodes with `w-1` made by this run, against an API whose nodes are `first`, then
/// each of `then` in turn.
async fn wait_fresh_w1(
    first: &[(&str, bool, bool)],
    then: Vec<Vec<(String, bool, bool)>>,
    deadline: Duration,
) -> Result<ApiPhase, super::NotReady> {
    let s = secrets();
    let script: Vec<Step> = then
        .into_iter()
        .map(|n| Box::new(move |s: &mut State| s.nodes = n) as Step)
        .collect();
    let state = Arc::new(Mutex::new(State {
        readyz: true,
        nodes: nodes(first),
        script,
    }));
    let port = serve(serving_cert(&s.ca), &s.ca.cert_pem, state).await;
    api(
        &kube(port, &s),
        3,
        &BTreeSet::from(["w-1".to_owned()]),
        &timing(deadline),
        Duration::from_secs(30),
        &Silent,
    )
    .await
}

/// A node that dies while the wait runs (seen Ready, then not), or was dead before it (its Ready
/// `Unknown`: the fake reports a `*-dead` node so), does not hold the wait once the nodes this run
/// made are Ready: the next turn's health check judges it. Before, the wait ran to its deadline
/// (half an hour on a real cloud) and failed the turn. A node never seen Ready and not `Unknown`
/// (joining, though an earlier run made it) is still waited for.
#[tokio::test]
async fn a_node_that_dies_during_the_wait_does_not_hold_the_fresh_ones() {
    let phase = wait_fresh_w1(
        &[
            ("cp-0", true, false),
            ("w-0", true, false),
            ("w-1", false, true),
        ],
        vec![
            nodes(&[
                ("cp-0", true, false),
                ("w-0", false, false),
                ("w-1", false, true),
            ]),
            nodes(&[
                ("cp-0", true, false),
                ("w-0", false, false),
                ("w-1", true, false),
            ]),
        ],
        Duration::from_secs(60),
    )
    .await
    .expect("not held by the node that died");
    assert_eq!(phase, ApiPhase::Ready { nodes: 2 });
    let phase = wait_fresh_w1(
        &[
            ("cp-0", true, false),
            ("w-0-dead", false, false),
            ("w-1", true, false),
        ],
        Vec::new(),
        Duration::from_secs(60),
    )
    .await
    .expect("not held by a node dead before the wait");
    assert_eq!(phase, ApiPhase::Ready { nodes: 2 });
    let e = wait_fresh_w1(
        &[
            ("cp-0", true, false),
            ("w-0", false, true),
            ("w-1", true, false),
        ],
        Vec::new(),
        Duration::from_millis(400),
    )
    .await
    .expect_err("w-0 is waited for");
    assert!(e.last.contains("2/3"), "{e}");
}
