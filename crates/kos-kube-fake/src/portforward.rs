//! `pods/portforward` over WebSocket, as kube-apiserver proxies it to the kubelet and the kubelet's
//! WebSocket port-forwarder answers (kubelet `cri/streaming/portforward/websocket.go`):
//! - `GET /api/v1/namespaces/{ns}/pods/{name}/portforward?ports=P[,Q]` upgraded to a WebSocket;
//!   the subprotocol is `v4.channel.k8s.io` when the client offers it (kube-rs offers `v5` then `v4`),
//!   else the unnamed binary protocol;
//! - every frame starts with its channel byte: port `i` has data channel `2i` and error channel
//!   `2i+1`; the server's first frame on each channel is the port, 2 bytes little-endian;
//! - a port that cannot be reached gets one text on its error channel (the kubelet's
//!   `error forwarding port P to pod NAME, uid UID: ...`) and the connection closes once every port
//!   is done.
//!
//! What a port leads to is the [`PortForward`] backend's business (the fake runs no containers):
//! without one, every port is refused. A pod that does not exist is 404 before the upgrade; a pod
//! whose node cannot be reached is the apiserver's 500 `error dialing backend`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::error::ApiError;
use crate::server::Shared;

/// The binary channel protocol kube-rs and kubectl negotiate.
pub const V4_CHANNEL: &str = "v4.channel.k8s.io";

/// A byte stream to a pod's port.
pub trait PodStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PodStream for T {}

/// Why a port of a pod cannot be forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// The pod's node (its kubelet) cannot be reached: the upgrade fails with a 500.
    #[error("error dialing backend: {0}")]
    Unreachable(String),
    /// Nothing accepts on that port in the pod: the port's error channel says so.
    #[error("{0}")]
    Refused(String),
}

/// Where the pods' ports lead (the kubelets' side of port-forwarding).
pub trait PortForward: Send + Sync + 'static {
    /// Connects to `port` of the pod `namespace/name` (stored as `pod`).
    fn connect(
        &self,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, Result<Box<dyn PodStream>, ForwardError>>;
}

/// The ports of `?ports=80,8080` (repeated parameters too), each 1-65535.
fn ports(query: Option<&str>) -> Result<Vec<u16>, ApiError> {
    let mut out = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if k != "ports" {
            continue;
        }
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => out.push(n),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid port {p:?}: must be between 1 and 65535"
                    )));
                }
            }
        }
    }
    if out.is_empty() {
        return Err(ApiError::bad_request("at least one port must be specified"));
    }
    Ok(out)
}

/// The subprotocol answered: `v4.channel.k8s.io` if offered, else none (binary channels).
fn subprotocol(headers: &HeaderMap) -> Result<Option<&'static str>, ApiError> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok(None);
    }
    if offered.iter().any(|p| p == V4_CHANNEL) {
        return Ok(Some(V4_CHANNEL));
    }
    Err(ApiError::bad_request(format!(
        "none of the offered WebSocket subprotocols {offered:?} is supported (want {V4_CHANNEL})"
    )))
}

fn is_websocket(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, want: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(want))
    };
    has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade")
}

/// The handler of `GET .../pods/{name}/portforward`.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Response {
    match upgrade(shared, &ns, &name, query.as_deref(), req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn upgrade(
    shared: Arc<Shared>,
    ns: &str,
    name: &str,
    query: Option<&str>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let pod = {
        let store = shared.store();
        let res = store
            .type_index("", "v1", "pods")
            .ok_or_else(|| ApiError::no_route("pods"))?;
        store.get(res, ns, name)?
    };
    let ports = ports(query)?;
    if !is_websocket(req.headers()) {
        return Err(ApiError::bad_request(
            "port-forward is served over WebSocket only (Upgrade: websocket); SPDY is not",
        ));
    }
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?
        .as_bytes()
        .to_vec();
    let protocol = subprotocol(req.headers())?;
    let backend = shared.port_forward();
    // The apiserver dials the kubelet before it answers the upgrade; the kubelet connects each port
    // once the streams exist (a refused port is an error frame, not an HTTP error).
    let mut conns: Vec<Result<Box<dyn PodStream>, String>> = Vec::new();
    for &p in &ports {
        let c = match &backend {
            Some(b) => b.connect(&pod, p).await,
            None => Err(ForwardError::Refused(format!(
                "failed to connect to localhost:{p}: connection refused (nothing runs in the fake's pods)"
            ))),
        };
        match c {
            Ok(s) => conns.push(Ok(s)),
            Err(ForwardError::Unreachable(why)) => {
                return Err(ApiError::new(
                    500,
                    "InternalError",
                    format!("error dialing backend: {why}"),
                ));
            }
            Err(ForwardError::Refused(why)) => conns.push(Err(why)),
        }
    }
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let name = name.to_owned();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                serve(ws, &name, &uid, &ports, conns).await;
            }
            Err(e) => tracing::debug!("kos-kube-fake portforward upgrade: {e}"),
        }
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, http::HeaderValue::from_static("websocket"));
    h.insert(
        header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&derive_accept_key(&key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = protocol {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            http::HeaderValue::from_static(p),
        );
    }
    Ok(r)
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(channel);
    b.extend_from_slice(data);
    Message::binary(b)
}

/// Pumps the channels until every port is done or the client closes.
async fn serve<S>(
    ws: WebSocketStream<S>,
    pod: &str,
    uid: &str,
    ports: &[u16],
    conns: Vec<Result<Box<dyn PodStream>, String>>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(16);
    let mut writers = Vec::new();
    let mut pumps = tokio::task::JoinSet::new();
    for (i, (port, conn)) in ports.iter().zip(conns).enumerate() {
        let (data, err) = channels(i);
        let prefix = port.to_le_bytes();
        if sink.send(frame(data, &prefix)).await.is_err()
            || sink.send(frame(err, &prefix)).await.is_err()
        {
            return;
        }
        match conn {
            Ok(c) => {
                let (mut r, w) = tokio::io::split(c);
                writers.push(Some(w));
                let tx = tx.clone();
                pumps.spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tx.send(frame(data, &buf[..n])).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
            Err(why) => {
                writers.push(None);
                let text = format!("error forwarding port {port} to pod {pod}, uid {uid}: {why}");
                if sink.send(frame(err, text.as_bytes())).await.is_err() {
                    return;
                }
            }
        }
    }
    drop(tx);
    let mut open = writers.iter().filter(|w| w.is_some()).count();
    while open > 0 {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => if sink.send(m).await.is_err() { break },
                None => break,
            },
            done = pumps.join_next() => {
                // A port's connection ended (the pod closed it): its stream is done.
                if done.is_some() { open = open.saturating_sub(1); }
            }
            incoming = stream.next() => match incoming {
                Some(Ok(Message::Binary(b))) if b.len() > 1 => {
                    let ch = usize::from(b[0]);
                    if ch % 2 == 0
                        && let Some(Some(w)) = writers.get_mut(ch / 2)
                        && w.write_all(&b[1..]).await.is_err()
                    {
                        writers[ch / 2] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    // Whatever the pod still sent before closing.
    while let Ok(m) = rx.try_recv() {
        if sink.send(m).await.is_err() {
            break;
        }
    }
    let _ = sink.send(Message::Close(None)).await;
}

/// Data and error channel of the `i`th port.
fn channels(i: usize) -> (u8, u8) {
    let data = u8::try_from(i * 2).unwrap_or(u8::MAX - 1);
    (data, data.saturating_add(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_parsed_as_kube_rs_sends_them() {
        assert_eq!(ports(Some("&ports=80%2C1234")).unwrap(), vec![80, 1234]);
        assert_eq!(ports(Some("ports=2379")).unwrap(), vec![2379]);
        assert!(ports(Some("ports=0")).is_err());
        assert!(ports(Some("")).is_err());
    }
}
