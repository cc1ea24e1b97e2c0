//! The CONNECT proxy into the clusters' API endpoints: a CONNECT to an endpoint the guest runtime
//! lists tunnels bytes both ways to its forwarder (here a TCP echo server); one to any other address
//! (the forwarder's own included) is a 502 and connects nowhere; another method is a 405; garbage
//! and an oversized head are a 400. `/_sim/proxy` tells where it listens.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::Harness;
use kos_sim::guests::{BoxFuture, GuestHost, GuestRuntime, KubeEndpoint};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ENDPOINT: &str = "172.24.4.10:6443";

/// A runtime with one cluster whose API is `ENDPOINT`, forwarded to `local`.
struct OneCluster {
    local: SocketAddr,
}

impl GuestRuntime for OneCluster {
    fn handle(&self, _: &mut GuestHost<'_>, _: &str, _: kos_sim::guests::GuestEvent) {}
    fn tick(&self, _: &mut GuestHost<'_>) {}
    fn next_wake(&self) -> Option<kos_sim::SimTime> {
        None
    }
    fn kube_endpoints(&self) -> Vec<KubeEndpoint> {
        vec![KubeEndpoint {
            endpoint: ENDPOINT.into(),
            local: self.local,
        }]
    }
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A TCP echo server: the cluster's forwarder, as far as the proxy can tell.
async fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn harness(local: SocketAddr) -> Harness {
    let mut h = Harness::new().await;
    assert!(h.sim.attach_guests(Arc::new(OneCluster { local })));
    h
}

fn proxy_addr(h: &Harness) -> String {
    h.sim
        .proxy_url()
        .strip_prefix("http://")
        .expect("an http URL")
        .to_owned()
}

/// Sends `request` and reads the whole answer (the proxy closes after a refusal).
async fn refused(h: &Harness, request: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy_addr(h)).await.expect("connect");
    s.write_all(request).await.expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    String::from_utf8(out).expect("text")
}

#[tokio::test]
async fn a_connect_to_a_listed_endpoint_tunnels_both_ways() {
    let h = harness(echo().await).await;
    let mut s = TcpStream::connect(proxy_addr(&h)).await.expect("connect");
    // What curl sends, with the first tunnelled bytes right behind the head.
    s.write_all(
        format!("CONNECT {ENDPOINT} HTTP/1.1\r\nHost: {ENDPOINT}\r\nUser-Agent: test\r\nProxy-Connection: Keep-Alive\r\n\r\nhello ")
            .as_bytes(),
    )
    .await
    .expect("write");
    let want = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let mut head = vec![0u8; want.len()];
    s.read_exact(&mut head).await.expect("the 200");
    assert_eq!(head, want, "{}", String::from_utf8_lossy(&head));
    s.write_all(b"world").await.expect("write");
    let mut echoed = [0u8; 11];
    s.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(&echoed, b"hello world");
    // Closing our side closes the tunnel: the echo's end follows.
    s.shutdown().await.expect("shutdown");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.expect("eof");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn an_address_nothing_serves_is_502_and_connects_nowhere() {
    // A listener the proxy must not reach: neither as an unlisted address nor as the forwarder's
    // own address (the proxy is not an open proxy, not even to its forwarders).
    let bystander = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    bystander.set_nonblocking(true).expect("nonblocking");
    let h = harness(bystander.local_addr().expect("addr")).await;
    for target in [
        "172.24.4.11:6443".to_owned(),
        "172.24.4.10:22".to_owned(),
        bystander.local_addr().expect("addr").to_string(),
    ] {
        let r = refused(
            &h,
            format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(
            r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{target}: {r}"
        );
    }
    // Answered before closing, so any connection it had made would be queued by now.
    let err = bystander.accept().expect_err("no connection was made");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
}

#[tokio::test]
async fn a_forwarder_that_refuses_is_502() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let h = harness(closed).await;
    let r = refused(
        &h,
        format!("CONNECT {ENDPOINT} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{r}");
}

#[tokio::test]
async fn other_methods_are_405_and_garbage_400() {
    let h = harness(echo().await).await;
    let r = refused(
        &h,
        format!("GET http://{ENDPOINT}/readyz HTTP/1.1\r\nHost: {ENDPOINT}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
    assert!(r.contains("\r\nAllow: CONNECT\r\n"), "{r}");

    for garbage in [
        &b"\x16\x03\x01\x02\x00garbage\r\n\r\n"[..],
        b"CONNECT\r\n\r\n",
        b"CONNECT 172.24.4.10 HTTP/1.1\r\n\r\n",
        b"CONNECT 172.24.4.10:6443 HTTP/1.1\r\nnot a header\r\n\r\n",
    ] {
        let r = refused(&h, garbage).await;
        assert!(
            r.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{:?}: {r}",
            String::from_utf8_lossy(garbage)
        );
    }

    // A head over 8 KiB, without its end.
    let mut big = format!("CONNECT {ENDPOINT} HTTP/1.1\r\n").into_bytes();
    while big.len() <= kos_sim::proxy::MAX_HEAD {
        big.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let r = refused(&h, &big).await;
    assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{r}");
}

#[tokio::test]
async fn the_admin_api_tells_where_the_proxy_listens() {
    let h = Harness::new().await;
    let r = h.call("GET", "/_sim/proxy", None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json, json!({"url": h.sim.proxy_url()}));
    assert_ne!(h.sim.proxy_url(), h.sim.base_url());
    // Without a runtime nothing is listed: nothing is tunnelled.
    let r = refused(
        &h,
        format!("CONNECT {ENDPOINT} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{r}");
}
