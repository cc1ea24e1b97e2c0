//! Kubernetes versions as kubeadm and the packages name them (`v1.31.4`, `1.31.4`).

use std::fmt;

/// `major.minor.patch`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// `v1.31.4` or `1.31.4` (pre-release suffixes are not simulated).
    pub fn parse(s: &str) -> Option<Version> {
        let core = s.strip_prefix('v').unwrap_or(s);
        let mut it = core.split('.').map(|p| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u32>().ok())
                .flatten()
        });
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(Some(major)), Some(Some(minor)), Some(Some(patch)), None) => Some(Version {
                major,
                minor,
                patch,
            }),
            _ => None,
        }
    }

    /// Same major and minor.
    pub fn same_minor(&self, other: &Version) -> bool {
        (self.major, self.minor) == (other.major, other.minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}
