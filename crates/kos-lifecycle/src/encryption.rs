//! Encryption at rest: which keys the control planes' kube-apiservers should run with, and the
//! steps of a key rotation, as upstream documents it (kubernetes.io, "Encrypting Confidential Data at
//! Rest", rotating a decryption key): (a) the new key added second on every control plane, (b) made
//! first on every control plane, (c) every Secret read and written again so it is sealed under the
//! new key, (d) the old key dropped.
//!
//! kos has no SSH: a control plane's configuration changes only by replacing the server. Each server
//! records the key NAMES it was made with ([`TAG_ENCRYPTION`]); `decide` replaces those whose record
//! differs from [`KeyState::desired`] ("encryption keys changed"), and a step advances only when
//! every control plane the cloud shows records the current step's set. The step is kept with the
//! keys on the operator's machine and written before anything acts on it, so a run killed anywhere
//! is finished by the next `kos up` (or `kos rotate encryption-key`).
//!
//! No step is skipped, even with one control plane: a control plane is replaced with a surge (the
//! successor runs before the old one is drained), so two API servers serve at once and the old one
//! must read what the new one writes. From `[K]` straight to `[N, K]` the new one would write under
//! `N`, which the old one cannot read; from `[N, K]` straight to `[N]` before the rewrite, Secrets
//! still under `K` would be unreadable. Each step only ever adds what the servers still running can
//! read.
//!
//! A cluster made by a kos without encryption has no key and no record: its first step adds the
//! key behind `identity` (`[identity, N]`: still written plainly, so the old API servers, which
//! have no configuration, read everything), then `[N, identity]`, then the rewrite encrypts the
//! Secrets written before. `identity` stays last for good, so nothing written plainly is ever
//! unreadable.

use kos_bootstrap::encryption::Provider;
use kos_bootstrap::{Encryption, EncryptionKey};
use serde::{Deserialize, Serialize};

/// `kos-enc=key-2.key-1.identity`: the key names a control plane's kube-apiserver runs with, in
/// order. Never key material.
pub const TAG_ENCRYPTION: &str = "kos-enc";
/// The record of a control plane made before kos encrypted Secrets: no configuration at all.
pub const NONE_RECORDED: &str = "identity";

/// Where a rotation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// No rotation: `current` writes.
    Steady,
    /// (a) `next` is added behind `current` on every control plane.
    Add,
    /// (b) `next` is made the first key on every control plane.
    Promote,
    /// (c) every Secret is written again, under `next`.
    Rewrite,
    /// (d) `current` is dropped from every control plane.
    Drop,
}

/// The cluster's keys and the rotation step, as stored (0600) on the operator's machine.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyState {
    pub format: String,
    /// The key Secrets are written with; `None` for a cluster made before kos encrypted them.
    pub current: Option<EncryptionKey>,
    /// The key a rotation puts in place.
    pub next: Option<EncryptionKey>,
    pub phase: Phase,
}

impl std::fmt::Debug for KeyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyState({:?}, {})", self.phase, self.desired_record())
    }
}

const FORMAT: &str = "kos-encryption/v1";

/// What the caller must do after [`KeyState::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing: the control planes are being replaced, or nothing is rotating.
    Wait,
    /// The step advanced: store the state before acting on it.
    Advanced,
    /// Every control plane writes under the new key: rewrite every Secret, then call
    /// [`KeyState::rewritten`].
    Rewrite,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the stored encryption keys are malformed: {0}")]
    Malformed(String),
    #[error("a key rotation is already under way (step {0:?}); run `kos up` to finish it")]
    Rotating(Phase),
}

impl KeyState {
    /// A new cluster's: one key, written from the start.
    pub fn new_cluster<R: rand::CryptoRng + ?Sized>(rng: &mut R) -> Self {
        Self {
            format: FORMAT.into(),
            current: Some(EncryptionKey::generate(rng, 1)),
            next: None,
            phase: Phase::Steady,
        }
    }

    /// A running cluster made without encryption: its first key is rolled in as a rotation from
    /// none.
    pub fn adopted<R: rand::CryptoRng + ?Sized>(rng: &mut R) -> Self {
        Self {
            format: FORMAT.into(),
            current: None,
            next: Some(EncryptionKey::generate(rng, 1)),
            phase: Phase::Add,
        }
    }

    /// Starts a rotation to a new key (`key-<n+1>`).
    ///
    /// # Errors
    /// One is already under way.
    pub fn start_rotation<R: rand::CryptoRng + ?Sized>(
        &mut self,
        rng: &mut R,
    ) -> Result<(), KeyError> {
        if self.phase != Phase::Steady {
            return Err(KeyError::Rotating(self.phase));
        }
        let index = self.current.as_ref().map_or(0, EncryptionKey::index) + 1;
        self.next = Some(EncryptionKey::generate(rng, index));
        self.phase = Phase::Add;
        Ok(())
    }

    /// The providers this step's control planes run with.
    #[must_use]
    pub fn desired(&self) -> Encryption {
        let sb =
            |keys: Vec<&EncryptionKey>| Provider::Secretbox(keys.into_iter().cloned().collect());
        let cur = self.current.as_ref();
        let providers = match (self.phase, &self.next) {
            (Phase::Add, Some(n)) => match cur {
                Some(k) => vec![sb(vec![k, n]), Provider::Identity],
                None => vec![Provider::Identity, sb(vec![n])],
            },
            (Phase::Promote | Phase::Rewrite, Some(n)) => {
                vec![
                    sb(std::iter::once(n).chain(cur).collect()),
                    Provider::Identity,
                ]
            }
            (Phase::Drop, Some(n)) => vec![sb(vec![n]), Provider::Identity],
            _ => vec![sb(cur.into_iter().collect()), Provider::Identity],
        };
        Encryption { providers }
    }

    /// [`Self::desired`]'s record: the tag value a control plane made now carries.
    #[must_use]
    pub fn desired_record(&self) -> String {
        self.desired().record()
    }

    /// The next step, from the records of the control planes the cloud shows (`None`: a server
    /// made before kos recorded keys). Advances only when every one records this step's set.
    pub fn step(&mut self, recorded: &[Option<&str>]) -> Step {
        let want = self.desired_record();
        let converged =
            !recorded.is_empty() && recorded.iter().all(|r| r.unwrap_or(NONE_RECORDED) == want);
        if !converged {
            return Step::Wait;
        }
        match self.phase {
            Phase::Steady => Step::Wait,
            Phase::Add => {
                self.phase = Phase::Promote;
                Step::Advanced
            }
            Phase::Promote => {
                self.phase = Phase::Rewrite;
                Step::Advanced
            }
            Phase::Rewrite => Step::Rewrite,
            Phase::Drop => {
                self.current = self.next.take();
                self.phase = Phase::Steady;
                Step::Advanced
            }
        }
    }

    /// Every Secret was written again under the new key: the old one can go.
    pub fn rewritten(&mut self) {
        if self.phase == Phase::Rewrite {
            self.phase = Phase::Drop;
        }
    }

    /// Reads a stored state.
    ///
    /// # Errors
    /// Malformed JSON, an unknown format or a bad key (names only in the message).
    pub fn from_json(text: &str) -> Result<Self, KeyError> {
        let s: Self = serde_json::from_str(text).map_err(|e| {
            KeyError::Malformed(format!(
                "{:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ))
        })?;
        if s.format != FORMAT {
            return Err(KeyError::Malformed(format!(
                "unknown format {:?}",
                s.format
            )));
        }
        for k in s.current.iter().chain(&s.next) {
            k.validate()
                .map_err(|e| KeyError::Malformed(e.to_string()))?;
        }
        let consistent = match s.phase {
            Phase::Steady => s.current.is_some() && s.next.is_none(),
            _ => s.next.is_some(),
        };
        if !consistent {
            return Err(KeyError::Malformed(format!(
                "step {:?} does not match its keys",
                s.phase
            )));
        }
        Ok(s)
    }

    /// The stored form (it holds the keys: write it 0600).
    #[must_use]
    pub fn to_json(&self) -> kos_bootstrap::Sensitive {
        kos_bootstrap::Sensitive::new(serde_json::to_string_pretty(self).unwrap_or_default() + "\n")
    }

    /// For `kos status`: the key names in use and the rotation step, if any.
    #[must_use]
    pub fn shown(&self) -> String {
        match (self.phase, &self.next) {
            (Phase::Steady, _) | (_, None) => {
                format!("Secrets encrypted with {}", self.desired_record())
            }
            (p, Some(n)) => format!(
                "rotating to {} (step {}: control planes run {})",
                n.name,
                match p {
                    Phase::Add => "1/4, adding it",
                    Phase::Promote => "2/4, making it first",
                    Phase::Rewrite => "3/4, rewriting every Secret",
                    _ => "4/4, dropping the old key",
                },
                self.desired_record()
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(1)
    }

    #[test]
    fn a_rotation_takes_every_upstream_step_and_waits_for_every_control_plane() {
        let mut s = KeyState::new_cluster(&mut rng());
        assert_eq!(s.desired_record(), "key-1.identity");
        assert_eq!(s.step(&[Some("key-1.identity")]), Step::Wait);
        s.start_rotation(&mut rng()).unwrap();
        assert!(matches!(
            s.start_rotation(&mut rng()),
            Err(KeyError::Rotating(Phase::Add))
        ));
        assert_eq!(s.desired_record(), "key-1.key-2.identity");
        // One control plane still runs the old set: wait.
        assert_eq!(
            s.step(&[Some("key-1.key-2.identity"), Some("key-1.identity")]),
            Step::Wait
        );
        assert_eq!(s.step(&[Some("key-1.key-2.identity")]), Step::Advanced);
        assert_eq!(s.desired_record(), "key-2.key-1.identity");
        assert_eq!(s.step(&[Some("key-2.key-1.identity")]), Step::Advanced);
        assert_eq!(s.phase, Phase::Rewrite);
        assert_eq!(s.step(&[Some("key-2.key-1.identity")]), Step::Rewrite);
        s.rewritten();
        assert_eq!(s.desired_record(), "key-2.identity");
        assert_eq!(s.step(&[Some("key-2.identity")]), Step::Advanced);
        assert_eq!(s.phase, Phase::Steady);
        assert_eq!(s.current.as_ref().unwrap().name, "key-2");
        // Stored and read back at any step.
        assert_eq!(KeyState::from_json(s.to_json().expose()).unwrap(), s);
        assert!(!format!("{s:?}").contains(s.current.as_ref().unwrap().secret.expose()));
    }

    #[test]
    fn a_cluster_without_keys_adds_its_first_behind_identity() {
        let mut s = KeyState::adopted(&mut rng());
        assert_eq!(s.desired_record(), "identity.key-1");
        // Control planes of an older kos record nothing: no configuration, i.e. identity.
        assert_eq!(s.step(&[None]), Step::Wait);
        assert_eq!(s.step(&[Some("identity.key-1")]), Step::Advanced);
        assert_eq!(s.desired_record(), "key-1.identity");
        assert_eq!(s.step(&[Some("key-1.identity")]), Step::Advanced);
        assert_eq!(s.step(&[Some("key-1.identity")]), Step::Rewrite);
        s.rewritten();
        assert_eq!(s.desired_record(), "key-1.identity");
        assert_eq!(s.step(&[Some("key-1.identity")]), Step::Advanced);
        assert_eq!(
            (s.phase, s.current.as_ref().unwrap().name.as_str()),
            (Phase::Steady, "key-1")
        );
    }
}
