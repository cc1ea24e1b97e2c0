//! Bootstrap tokens and the certificate key: random strings in the shapes kubeadm checks.

use std::time::Duration;

use rand::{CryptoRng, Rng};
use time::OffsetDateTime;

use crate::Sensitive;

const TOKEN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A kubeadm bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`. The id is public (it names the
/// `bootstrap-token-<id>` Secret); the secret half is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: Sensitive,
    /// How long the token lives once `kubeadm init` creates it (the join window).
    pub ttl: Duration,
    /// When the CLI should consider it expired: generation time + ttl. Drives [`BootstrapToken::is_expired`].
    pub expires: OffsetDateTime,
}

impl BootstrapToken {
    /// A fresh token valid for `ttl` from `now`.
    pub fn generate<R: CryptoRng + ?Sized>(
        rng: &mut R,
        now: OffsetDateTime,
        ttl: Duration,
    ) -> Self {
        let mut pick = |n: usize| -> String {
            (0..n)
                .map(|_| char::from(TOKEN_ALPHABET[rng.random_range(0..TOKEN_ALPHABET.len())]))
                .collect()
        };
        let id = pick(6);
        let secret = Sensitive::new(pick(16));
        Self {
            id,
            secret,
            ttl,
            expires: now + ttl,
        }
    }

    /// `id.secret`, as kubeadm takes it.
    pub fn value(&self) -> Sensitive {
        Sensitive::new(format!("{}.{}", self.id, self.secret.expose()))
    }

    /// True when less than `margin` of validity is left at `now`: a join started then could outlive it.
    pub fn is_expired(&self, now: OffsetDateTime, margin: Duration) -> bool {
        now + margin >= self.expires
    }

    /// True if both halves have kubeadm's shape.
    pub fn is_well_formed(&self) -> bool {
        let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| TOKEN_ALPHABET.contains(&b));
        ok(&self.id, 6) && ok(self.secret.expose(), 16)
    }
}

/// 32 random bytes, hex: the AES key kubeadm uses to encrypt the `kubeadm-certs` Secret.
pub fn certificate_key<R: CryptoRng + ?Sized>(rng: &mut R) -> Sensitive {
    let mut key = [0u8; 32];
    rng.fill_bytes(&mut key);
    Sensitive::new(hex(&key))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A Go duration string kubeadm's `metav1.Duration` parses: `2h`, `90m`, `45s`.
pub(crate) fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn token_has_kubeadm_shape_and_expires() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let t = BootstrapToken::generate(
            &mut StdRng::seed_from_u64(1),
            now,
            Duration::from_secs(7200),
        );
        assert!(t.is_well_formed());
        let v = t.value();
        assert_eq!(v.expose().len(), 23);
        assert_eq!(&v.expose()[6..7], ".");
        assert!(!t.is_expired(now, Duration::from_secs(600)));
        assert!(t.is_expired(now + Duration::from_secs(6601), Duration::from_secs(600)));
        assert_eq!(format!("{t:?}").matches("***").count(), 1);
    }

    #[test]
    fn certificate_key_is_64_hex() {
        let k = certificate_key(&mut StdRng::seed_from_u64(2));
        assert_eq!(k.expose().len(), 64);
        assert!(k.expose().bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(go_duration(Duration::from_secs(5400)), "90m");
        assert_eq!(go_duration(Duration::from_secs(61)), "61s");
    }
}
