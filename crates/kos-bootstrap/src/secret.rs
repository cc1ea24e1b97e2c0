//! A secret string that prints as `***` and compares by value.
//!
//! `secrecy::SecretString` keeps the value out of Debug; this wrapper adds Display, equality (so a parsed
//! bundle can be compared with the generated one) and Serialize, which exposes the value on purpose: the
//! only things we serialise are the documents that must carry it (kubeadm configs, the secrets bundle).

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret value: Debug and Display print `***`.
#[derive(Clone)]
pub struct Sensitive(SecretString);

impl Sensitive {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The value itself: call only where it is written into a rendered document.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl From<SecretString> for Sensitive {
    fn from(value: SecretString) -> Self {
        Self(value)
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl PartialEq for Sensitive {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Sensitive {}

impl Serialize for Sensitive {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for Sensitive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::new)
    }
}
