//! Identifiers and timestamps in the forms the real services use.

use chrono::{DateTime, SecondsFormat, Utc};

/// A dashed UUID (Nova, Neutron, Octavia, Cinder, Glance ids).
pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Keystone's 32-hex-digit ids.
pub fn hex_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `2026-11-22T10:11:12Z` (Nova, Neutron, Glance).
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `2026-11-22T10:11:12.123456` (Octavia, Cinder: microseconds, no zone).
pub fn iso_micro(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// `2026-11-22T10:11:12.000000Z` (Keystone token expiry).
pub fn iso_micro_z(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A MAC address in OpenStack's default `fa:16:3e` prefix.
pub fn mac() -> String {
    let b = uuid::Uuid::new_v4().into_bytes();
    format!("fa:16:3e:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
}
