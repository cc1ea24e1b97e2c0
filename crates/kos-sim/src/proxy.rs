//! An HTTP/1.1 CONNECT proxy into the simulated clusters' API endpoints.
//!
//! A cluster's API listens at its floating IP (`172.24.4.10:6443`), which is not routable on this
//! machine; the guest runtime reaches it through a local forwarder (`127.0.0.1:41234`, see
//! [`crate::guests::KubeEndpoint`]). A process that only knows the endpoint (kubectl, an operator
//! started by a test) gets there the way it would through a bastion's proxy:
//! `HTTPS_PROXY=http://127.0.0.1:PORT` ([`crate::Sim::proxy_url`]), so no product code ever names a
//! simulator address.
//!
//! # Guarantees
//! - `CONNECT host:port HTTP/1.1` (any headers) whose `host:port` is an endpoint the guest runtime
//!   lists at that moment answers `200 Connection established`, then copies bytes both ways to its
//!   forwarder (bytes the client sent after the request head go first).
//! - It never connects anywhere but a listed forwarder: an address nothing serves is `502`, and so is
//!   a forwarder that refuses the connection. It is not an open proxy.
//! - Another method is `405`; a malformed request line or header, or a request head over
//!   [`MAX_HEAD`] bytes, is `400`. Every refusal closes the connection.

use std::net::SocketAddr;
use std::sync::Weak;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::app::App;

/// The longest request head (request line and headers) the proxy reads.
pub const MAX_HEAD: usize = 8 * 1024;

/// How long a refused client may keep sending before the proxy closes anyway.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the proxy refuses a request, and the status it answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("request head over {MAX_HEAD} bytes")]
    TooLarge,
    #[error("method {0} not allowed: this proxy only tunnels (CONNECT)")]
    Method(String),
    #[error("nothing serves {0}")]
    Unknown(String),
    #[error("the forwarder for {target} refused: {detail}")]
    Unreachable { target: String, detail: String },
}

impl Refusal {
    /// The status line's code and reason.
    pub fn status(&self) -> (u16, &'static str) {
        match self {
            Refusal::Malformed(_) | Refusal::TooLarge => (400, "Bad Request"),
            Refusal::Method(_) => (405, "Method Not Allowed"),
            Refusal::Unknown(_) | Refusal::Unreachable { .. } => (502, "Bad Gateway"),
        }
    }

    /// The whole response: a short text body, and `Allow` on a 405 as RFC 9110 requires.
    fn response(&self) -> String {
        let (code, reason) = self.status();
        let body = format!("{self}\n");
        let allow = if code == 405 {
            "Allow: CONNECT\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {code} {reason}\r\n{allow}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Where a request head ends (the index after its blank line), if it is complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The `host:port` a complete request head asks to tunnel to.
pub fn parse_head(head: &[u8]) -> Result<String, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| Refusal::Malformed("not ASCII"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("request line"));
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method) || target.is_empty() || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(Refusal::Malformed("request line"));
    }
    for h in lines.take_while(|l| !l.is_empty()) {
        match h.split_once(':') {
            Some((name, _)) if token(name) => {}
            _ => return Err(Refusal::Malformed("header line")),
        }
    }
    if method != "CONNECT" {
        return Err(Refusal::Method(method.to_owned()));
    }
    // CONNECT takes the authority form only: host and port, nothing else (RFC 9110 §9.3.6).
    match target.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && !host.contains(['/', '@', '?', '#'])
                && port.parse::<u16>().is_ok() =>
        {
            Ok(target.to_owned())
        }
        _ => Err(Refusal::Malformed("CONNECT target is not host:port")),
    }
}

/// The forwarder of `target` among the endpoints the runtime lists now, if any.
fn forwarder(app: &App, target: &str) -> Option<SocketAddr> {
    // Driven first, as `/_sim/kube-endpoints` is, so that the list is as of now.
    drop(app.cloud());
    app.guests()?
        .kube_endpoints()
        .into_iter()
        .find(|e| e.endpoint.eq_ignore_ascii_case(target))
        .map(|e| e.local)
}

/// Serves the proxy on `listener` until the task is aborted (which ends its tunnels too). It holds
/// the simulator weakly: once it is gone every request is a `502`.
pub fn spawn(listener: TcpListener, app: Weak<App>) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Owned here so that aborting the accept loop drops, and so aborts, every tunnel.
        let mut conns = JoinSet::new();
        loop {
            while conns.try_join_next().is_some() {}
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("kos-sim proxy: accept failed: {e}");
                    continue;
                }
            };
            let app = app.clone();
            conns.spawn(async move {
                if let Err(e) = serve(stream, &app).await {
                    tracing::debug!(%peer, "kos-sim proxy: {e}");
                }
            });
        }
    })
}

/// One client connection: its request, then the tunnel or the refusal.
async fn serve(mut client: TcpStream, app: &Weak<App>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() >= MAX_HEAD {
            return refuse(&mut client, Refusal::TooLarge).await;
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            // The client left before finishing its request: there is nobody to answer.
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if end > MAX_HEAD {
        return refuse(&mut client, Refusal::TooLarge).await;
    }
    let target = match parse_head(&buf[..end]) {
        Ok(t) => t,
        Err(r) => return refuse(&mut client, r).await,
    };
    let Some(local) = app.upgrade().and_then(|app| forwarder(&app, &target)) else {
        return refuse(&mut client, Refusal::Unknown(target)).await;
    };
    let mut upstream = match TcpStream::connect(local).await {
        Ok(s) => s,
        Err(e) => {
            let detail = e.to_string();
            return refuse(&mut client, Refusal::Unreachable { target, detail }).await;
        }
    };
    tracing::debug!(%target, %local, "kos-sim proxy: tunnel");
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    // A client may send its first bytes (a TLS ClientHello) without waiting for the 200.
    upstream.write_all(&buf[end..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

async fn refuse(client: &mut TcpStream, r: Refusal) -> std::io::Result<()> {
    tracing::debug!("kos-sim proxy: {r}");
    client.write_all(r.response().as_bytes()).await?;
    client.shutdown().await?;
    // A lingering close: closing with the client's bytes unread would reset the connection, and
    // the client could lose the answer; so read until it closes too (or gives up).
    let mut sink = [0u8; 1024];
    let drain = async { while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(LINGER, drain).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_with_headers_names_its_target() {
        let head = b"CONNECT 172.24.4.10:6443 HTTP/1.1\r\nHost: 172.24.4.10:6443\r\nProxy-Connection: Keep-Alive\r\n\r\n";
        assert_eq!(parse_head(head), Ok("172.24.4.10:6443".to_owned()));
        assert_eq!(head_end(head), Some(head.len()));
    }

    #[test]
    fn other_methods_are_405_and_malformed_requests_400() {
        let r = parse_head(b"GET http://172.24.4.10:6443/ HTTP/1.1\r\n\r\n").expect_err("GET");
        assert_eq!(r.status().0, 405);
        assert!(r.response().contains("Allow: CONNECT\r\n"));
        for bad in [
            &b"CONNECT 172.24.4.10:6443\r\n\r\n"[..],
            b"CONNECT  172.24.4.10:6443 HTTP/1.1\r\n\r\n",
            b"CONNECT 172.24.4.10:6443 HTTP/2\r\n\r\n",
            b"CONNECT 172.24.4.10 HTTP/1.1\r\n\r\n",
            b"CONNECT 172.24.4.10:https HTTP/1.1\r\n\r\n",
            b"CONNECT http://172.24.4.10:6443/ HTTP/1.1\r\n\r\n",
            b"CONNECT 172.24.4.10:6443 HTTP/1.1\r\nno colon here\r\n\r\n",
            b"CONNECT 172.24.4.10:6443 HTTP/1.1\r\n: empty name\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            let r = parse_head(bad).expect_err("refused");
            assert_eq!(r.status().0, 400, "{}", String::from_utf8_lossy(bad));
        }
    }
}
