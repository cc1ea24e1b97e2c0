//! The crate's one error type. No variant ever carries a secret value: fields are named, values are not.

use std::fmt;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while generating or rendering a node's bootstrap.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input failed validation; `reason` describes the rule, never a secret value.
    #[error("invalid {field}: {reason}")]
    Invalid { field: String, reason: String },
    /// rcgen refused to build or sign a certificate.
    #[error("certificate generation failed: {0}")]
    Pki(#[from] rcgen::Error),
    /// A PEM or DER document could not be read.
    #[error("malformed {what}")]
    Malformed { what: &'static str },
    /// The stored secrets bundle could not be parsed (position only: the bundle is secret).
    #[error("malformed secrets bundle: {0}")]
    Bundle(String),
    /// A rendered part would be mangled by cloud-init's Jinja pass.
    #[error(
        "{part} contains a Jinja delimiter ('{{{{', '{{%' or '{{#'), which cloud-init would try to render"
    )]
    JinjaDelimiter { part: String },
    /// The user-data exceeds what Nova accepts.
    #[error(
        "user-data for {node} is {size} bytes once base64-encoded, over Nova's {limit}-byte limit; largest parts: {parts}"
    )]
    UserDataTooLarge {
        node: String,
        size: usize,
        limit: usize,
        parts: PartSizes,
    },
    /// The built-in pins table (src/pins.yaml) is malformed: a bug caught by the tests.
    #[error("built-in pins table is malformed: {0}")]
    Pins(String),
    /// YAML serialisation failed (a bug: our types always serialise).
    #[error("YAML serialisation failed: {0}")]
    Yaml(String),
}

impl Error {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The largest parts of an oversized user-data, largest first, as (name, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSizes(pub Vec<(String, usize)>);

impl fmt::Display for PartSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, size)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} ({size} B)")?;
        }
        Ok(())
    }
}
