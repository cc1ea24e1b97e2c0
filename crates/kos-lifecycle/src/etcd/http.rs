//! One HTTP/1.1 request and its answer over a stream: the gateway needs no more than that, and every call
//! gets its own stream (a port-forward per call), so the connection closes after it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::EtcdError;

/// The largest answer read: a member list of a few members is a few KiB.
const MAX_ANSWER: usize = 1 << 20;

/// POSTs `body` (JSON) to `path` and returns the status and the body.
pub(super) async fn post<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), EtcdError> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost:2379\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.map_err(io)?;
    stream.write_all(body).await.map_err(io)?;
    stream.flush().await.map_err(io)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(n) => n,
            // A peer that closes without close_notify after a complete answer: judge what arrived.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(io(e)),
        };
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if raw.len() > MAX_ANSWER {
            return Err(bad("the answer is larger than 1 MiB"));
        }
        if let Some(done) = complete(&raw)? {
            return Ok(done);
        }
    }
    complete(&raw)?.ok_or_else(|| bad("the connection closed before the answer was complete"))
}

/// The status and body once `raw` holds a whole answer (by Content-Length, chunked, or up to EOF when
/// neither is given and the stream ended: the caller decides that by calling again at EOF).
fn complete(raw: &[u8]) -> Result<Option<(u16, Vec<u8>)>, EtcdError> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad("the header is not UTF-8"))?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no HTTP status line"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| bad("a malformed Content-Length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    if chunked {
        return Ok(dechunk(rest)?.map(|b| (status, b)));
    }
    match length {
        Some(n) if rest.len() >= n => Ok(Some((status, rest[..n].to_vec()))),
        Some(_) => Ok(None),
        None => Ok(Some((status, rest.to_vec()))),
    }
}

/// The body of a chunked transfer once its last chunk arrived.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, EtcdError> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| bad("a malformed chunk"))?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| bad("a malformed chunk size"))?;
        let data = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[..size]);
        rest = &data[size + 2..];
    }
}

fn io(e: std::io::Error) -> EtcdError {
    EtcdError::transport(super::Step::Connection, e)
}

fn bad(what: &'static str) -> EtcdError {
    EtcdError::Transport {
        what: super::Step::MalformedHttp(what),
        source: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn answers_by_length_by_chunks_and_partial() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(complete(whole).unwrap(), Some((200, b"{}".to_vec())));
        assert_eq!(complete(&whole[..whole.len() - 1]).unwrap(), None);
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(
            complete(chunked).unwrap(),
            Some((404, br#"{"a":1}"#.to_vec()))
        );
        assert_eq!(complete(&chunked[..60]).unwrap(), None);
        assert!(complete(b"garbage\r\n\r\n").is_err());
    }
}
