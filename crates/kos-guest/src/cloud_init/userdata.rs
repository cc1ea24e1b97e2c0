//! From user_data bytes to the parts cloud-init handles: gzip is inflated, MIME multipart is split,
//! and each part is classified by its content type or, for a plain part, by its first line, as
//! cloud-init's `user_data.py` and `handlers/` do. Parts the guest cannot handle come back as
//! [`Part::Unsupported`] so the caller reports them.

use std::io::Read;

use base64::Engine;
use flate2::read::GzDecoder;

/// Inflated user-data larger than this is refused (cloud-init has no limit; a gzip-bomb guard).
const MAX_INFLATED: u64 = 16 << 20;

/// One part of the user-data, before Jinja rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// `#cloud-config` text (or `text/cloud-config`).
    CloudConfig(String),
    /// A Jinja template (`## template: jinja` header or `text/jinja2`): the text after the header,
    /// to be rendered and classified again.
    Jinja(String),
    /// A shell script (`#!` or `text/x-shellscript`): cloud-init would run it; the guest runs no shell.
    ShellScript,
    /// Anything else, with what it is (for the report).
    Unsupported(String),
}

/// Why the user-data could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("cannot inflate the gzip user-data: {0}")]
    Gzip(String),
    #[error("user-data inflates past {MAX_INFLATED} bytes")]
    TooLarge,
    #[error("user-data is not UTF-8 text")]
    NotText,
    #[error("MIME multipart user-data: {0}")]
    Mime(String),
}

/// Inflates gzip (by its magic bytes, as cloud-init's `decomp_gzip`).
pub fn inflate(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_INFLATED + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if out.len() as u64 > MAX_INFLATED {
        return Err(DecodeError::TooLarge);
    }
    Ok(out)
}

/// The parts of a user-data payload (the bytes after Nova's base64).
pub fn parts(bytes: &[u8]) -> Result<Vec<Part>, DecodeError> {
    let raw = inflate(bytes)?;
    let text = String::from_utf8(raw).map_err(|_| DecodeError::NotText)?;
    let head = text.lines().next().unwrap_or_default().to_ascii_lowercase();
    if head.starts_with("content-type:") || head.starts_with("mime-version:") {
        return mime(&text);
    }
    Ok(vec![classify(&text)])
}

/// A plain part, by its first line (cloud-init's "starts with" table).
pub fn classify(text: &str) -> Part {
    let first = text.lines().next().unwrap_or_default().trim_end();
    if let Some(rest) = jinja_header(first) {
        let _ = rest;
        let body = text.split_once('\n').map(|(_, b)| b).unwrap_or_default();
        return Part::Jinja(body.to_owned());
    }
    if first == "#cloud-config" || first.starts_with("#cloud-config ") {
        return Part::CloudConfig(text.to_owned());
    }
    if first.starts_with("#!") {
        return Part::ShellScript;
    }
    for (prefix, what) in [
        ("#include", "an include (#include)"),
        ("#cloud-boothook", "a boothook (#cloud-boothook)"),
        ("#part-handler", "a part handler (#part-handler)"),
        ("#cloud-config-archive", "a cloud-config archive"),
        ("#upstart-job", "an upstart job"),
    ] {
        if first.starts_with(prefix) {
            return Part::Unsupported(what.into());
        }
    }
    Part::Unsupported("unhandled non-multipart (text/x-not-multipart) user-data".into())
}

/// `## template: jinja` (any case, any spacing after the colon), as cloud-init's header regex.
fn jinja_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("##")?.trim_start();
    let lower = rest.to_ascii_lowercase();
    let after = lower.strip_prefix("template:")?.trim();
    (after == "jinja").then_some(rest)
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Headers (with folded continuation lines) and the body after the first blank line.
fn split_headers(text: &str) -> (Vec<(String, String)>, String) {
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut lines = text.split_inclusive('\n');
    let mut consumed = 0;
    for line in lines.by_ref() {
        consumed += line.len();
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if l.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push(' ');
                last.1.push_str(l.trim());
            }
            continue;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    (headers, text[consumed.min(text.len())..].to_owned())
}

fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn mime(text: &str) -> Result<Vec<Part>, DecodeError> {
    let (headers, body) = split_headers(text);
    let ct = header_value(&headers, "Content-Type").unwrap_or("text/plain");
    let media = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if !media.starts_with("multipart/") {
        return Ok(vec![single(&media, &headers, &body)?]);
    }
    let b = boundary(ct).ok_or_else(|| DecodeError::Mime("no boundary in Content-Type".into()))?;
    let delim = format!("--{b}");
    let mut parts = Vec::new();
    let mut current: Option<String> = None;
    for line in body.split_inclusive('\n') {
        let l = line.trim_end_matches(['\r', '\n']);
        if l == delim || l == format!("{delim}--") {
            if let Some(p) = current.take() {
                let (h, b) = split_headers(&p);
                let ct = header_value(&h, "Content-Type").unwrap_or("text/x-not-multipart");
                let media = ct
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase();
                parts.push(single(&media, &h, &b)?);
            }
            if l != delim {
                return Ok(parts);
            }
            current = Some(String::new());
        } else if let Some(p) = current.as_mut() {
            p.push_str(line);
        }
    }
    Err(DecodeError::Mime(format!("no closing boundary {delim}--")))
}

fn single(media: &str, headers: &[(String, String)], body: &str) -> Result<Part, DecodeError> {
    let body = match header_value(headers, "Content-Transfer-Encoding") {
        Some(enc) if enc.eq_ignore_ascii_case("base64") => {
            let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|e| DecodeError::Mime(format!("part is not valid base64: {e}")))?;
            let bytes = inflate(&bytes)?;
            String::from_utf8(bytes).map_err(|_| DecodeError::NotText)?
        }
        _ => body.to_owned(),
    };
    Ok(match media {
        "text/cloud-config" => Part::CloudConfig(body),
        "text/jinja2" => match classify(&body) {
            Part::Jinja(b) => Part::Jinja(b),
            // text/jinja2 without the header: cloud-init still renders it.
            _ => Part::Jinja(body),
        },
        "text/x-shellscript" => Part::ShellScript,
        "text/x-not-multipart" | "text/plain" => classify(&body),
        other => Part::Unsupported(format!("a MIME part of type {other}")),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn gzip_and_first_lines_are_classified() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"## template: jinja\n#cloud-config\na: 1\n")
            .unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(
            parts(&gz).unwrap(),
            vec![Part::Jinja("#cloud-config\na: 1\n".into())]
        );
        assert_eq!(
            parts(b"#!/bin/sh\necho\n").unwrap(),
            vec![Part::ShellScript]
        );
        assert!(matches!(
            parts(b"hello\n").unwrap()[0],
            Part::Unsupported(_)
        ));
    }

    #[test]
    fn mime_multipart_is_split_by_type() {
        let text = "Content-Type: multipart/mixed; boundary=\"XX\"\nMIME-Version: 1.0\n\n--XX\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: []\n--XX\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n--XX\nContent-Type: text/x-include-url\n\nhttp://x\n--XX--\n";
        let p = parts(text.as_bytes()).unwrap();
        assert_eq!(
            p[0],
            Part::CloudConfig("#cloud-config\nruncmd: []\n".into())
        );
        assert_eq!(p[1], Part::ShellScript);
        assert!(matches!(&p[2], Part::Unsupported(w) if w.contains("x-include-url")));
        assert!(parts(b"Content-Type: multipart/mixed; boundary=Q\n\n--Q\n\nx\n").is_err());
    }
}
