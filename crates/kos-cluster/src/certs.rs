//! How long a control plane's certificates last. kubeadm issues a control plane's serving and client
//! certificates (API server, etcd, front proxy, its kubeconfigs) for one year when the node is made
//! (`certificateValidityPeriod`, 8760h by default; the CAs last ten years), and kos never renews them
//! in place: a control plane is replaced before they run out, which issues new ones.

use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// kubeadm's default `certificateValidityPeriod`.
pub const VALIDITY: Duration = Duration::days(365);
/// A control plane with less left than this is replaced by `kos up`.
pub const RENEW_BEFORE: Duration = Duration::days(30);

/// When the certificates of a control plane made at `created` (Nova's RFC 3339 time) expire.
#[must_use]
pub fn expiry(created: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(created, &Rfc3339)
        .ok()
        .map(|t| t + VALIDITY)
}

/// `expiry` as a date (`2027-11-25`).
#[must_use]
pub fn date(t: OffsetDateTime) -> String {
    let d = t.date();
    format!("{}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// Whether a control plane made at `created` is due for replacement at `now` (Unix seconds), and the
/// reason to show.
#[must_use]
pub fn due(created: &str, now: i64) -> Option<String> {
    let until = expiry(created)?;
    let now = OffsetDateTime::from_unix_timestamp(now).ok()?;
    (until - now < RENEW_BEFORE).then(|| {
        format!(
            "its kubeadm certificates expire on {} (less than {} days left)",
            date(until),
            RENEW_BEFORE.whole_days()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_year_less_thirty_days_makes_a_control_plane_due() {
        let made = "2025-12-01T10:00:00Z";
        let t = |s: &str| {
            OffsetDateTime::parse(s, &Rfc3339)
                .expect("time")
                .unix_timestamp()
        };
        assert_eq!(expiry(made).map(date).as_deref(), Some("2026-12-01"));
        assert_eq!(due(made, t("2026-10-31T10:00:00Z")), None);
        let why = due(made, t("2026-11-02T10:00:00Z")).expect("due");
        assert!(why.contains("2026-12-01"), "{why}");
        assert!(due(made, t("2027-01-01T00:00:00Z")).is_some(), "expired");
        assert_eq!(due("yesterday", t("2026-11-02T10:00:00Z")), None);
    }
}
