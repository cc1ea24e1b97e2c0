//! Nova's user-data limit and what to do about it: gzip when large, refuse when still too large, and
//! say which parts are to blame.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::error::PartSizes;
use crate::{Error, Result};

/// Nova: "The provided user data must be base64 encoded and is restricted to 65535 bytes".
pub const NOVA_USER_DATA_LIMIT: usize = 65535;
/// Above this many raw bytes the user-data is gzipped (cloud-init detects and inflates it).
pub const GZIP_THRESHOLD: usize = 16 * 1024;
/// How many parts an oversize error names.
const NAMED_PARTS: usize = 5;

/// Length of `n` bytes once base64-encoded (with padding).
pub fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Deterministic gzip (mtime 0, best compression).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    // Writing to and finishing a Vec-backed encoder cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// Returns (payload, gzipped) or the named error if the payload's base64 exceeds Nova's limit.
pub fn fit(node: &str, text: &[u8], parts: &[(String, usize)]) -> Result<(Vec<u8>, bool)> {
    let (payload, gzipped) = if text.len() > GZIP_THRESHOLD {
        (gzip(text), true)
    } else {
        (text.to_vec(), false)
    };
    let size = base64_len(payload.len());
    if size > NOVA_USER_DATA_LIMIT {
        let mut largest = parts.to_vec();
        largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        largest.truncate(NAMED_PARTS);
        return Err(Error::UserDataTooLarge {
            node: node.to_string(),
            size,
            limit: NOVA_USER_DATA_LIMIT,
            parts: PartSizes(largest),
        });
    }
    Ok((payload, gzipped))
}
