//! Types shared by every service's model: tag filters, the string-enum pattern for statuses (so a status a
//! newer cloud invents decodes as `Unknown` instead of failing the whole list), links and lenient decoders.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Declares a status enum that (de)serialises as the API's string, with an `Unknown(String)` fallback.
macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $var,)+
            /// A value this version of kos does not know (kept verbatim).
            Unknown(String),
        }
        impl $name {
            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self { $(Self::$var => $s,)+ Self::Unknown(s) => s }
            }
        }
        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s { $($s => Self::$var,)+ other => Self::Unknown(other.to_owned()) }
            }
        }
        impl Default for $name {
            fn default() -> Self { Self::Unknown(String::new()) }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
        }
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> { s.serialize_str(self.as_str()) }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Option::<String>::deserialize(d)?.unwrap_or_default();
                Ok(Self::from(s.as_str()))
            }
        }
    };
}
pub(crate) use string_enum;

/// Tag filters as Neutron, Nova and Octavia take them (`tags`, `tags-any`, `not-tags`, `not-tags-any`,
/// each a comma-separated list). An empty query filters nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagQuery {
    /// All of these.
    pub tags: Vec<String>,
    /// At least one of these.
    pub tags_any: Vec<String>,
    /// Not all of these.
    pub not_tags: Vec<String>,
    /// None of these.
    pub not_tags_any: Vec<String>,
}

impl TagQuery {
    /// Resources carrying every tag in `tags` (kos observes with `["kos-cluster=<name>"]`).
    pub fn all<I: IntoIterator<Item = S>, S: Into<String>>(tags: I) -> Self {
        TagQuery {
            tags: tags.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Resources carrying at least one tag of `tags`.
    pub fn any<I: IntoIterator<Item = S>, S: Into<String>>(tags: I) -> Self {
        TagQuery {
            tags_any: tags.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
            && self.tags_any.is_empty()
            && self.not_tags.is_empty()
            && self.not_tags_any.is_empty()
    }

    /// Query parameters, omitting empty lists.
    pub fn to_query(&self) -> Vec<(String, String)> {
        [
            ("tags", &self.tags),
            ("tags-any", &self.tags_any),
            ("not-tags", &self.not_tags),
            ("not-tags-any", &self.not_tags_any),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_owned(), v.join(",")))
        .collect()
    }
}

/// A `{"href", "rel"}` link.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Link {
    pub href: String,
    pub rel: String,
}

/// A quota line: the limit (-1 = unlimited), what is used and what is reserved by in-flight requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuotaUsage {
    pub limit: i64,
    #[serde(alias = "in_use")]
    pub used: i64,
    pub reserved: i64,
}

impl QuotaUsage {
    /// How many more fit (`None` = unlimited).
    pub fn remaining(&self) -> Option<i64> {
        (self.limit >= 0).then(|| (self.limit - self.used - self.reserved).max(0))
    }
}

impl fmt::Display for QuotaUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.limit < 0 {
            write!(f, "{} used of unlimited", self.used)
        } else {
            write!(f, "{} used of {}", self.used, self.limit)
        }
    }
}

/// A request kos refuses to send because the cloud would reject it (checked locally, so the error can say
/// exactly what is wrong).
pub(crate) fn invalid(what: impl Into<String>, detail: impl Into<String>) -> crate::CloudError {
    crate::CloudError::Invalid {
        what: what.into(),
        detail: detail.into(),
    }
}

/// `null` decodes as the type's default (many OpenStack fields are `null` rather than absent).
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A number that some API versions send as a string (`"swap": ""`, `"delay": "3"`); blanks are 0.
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num {
        N(u64),
        F(f64),
        S(String),
    }
    Ok(match Option::<Num>::deserialize(d)? {
        None => 0,
        Some(Num::N(n)) => n,
        // Only whole, non-negative floats make sense here; anything else is treated as 0.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(Num::F(f)) => f.max(0.0) as u64,
        Some(Num::S(s)) => s.trim().parse().unwrap_or(0),
    })
}

/// Percent-encodes one path segment (tags such as `kos-cluster=a` go into `…/tags/{tag}`).
pub(crate) fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'=' | b':' | b'@')
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    string_enum!(Color { Red = "RED", Blue = "BLUE" });

    #[test]
    fn string_enums_keep_unknown_values() -> serde_json::Result<()> {
        let c: Vec<Color> = serde_json::from_str(r#"["RED","GREEN",null]"#)?;
        assert_eq!(
            c,
            vec![Color::Red, Color::Unknown("GREEN".into()), Color::default()]
        );
        assert_eq!(serde_json::to_string(&c[1])?, r#""GREEN""#);
        Ok(())
    }

    #[test]
    fn tag_query_renders_comma_lists_and_skips_empty_ones() {
        let q = TagQuery {
            tags: vec!["kos-cluster=a".into(), "kos-id=net".into()],
            not_tags_any: vec!["x".into()],
            ..Default::default()
        };
        assert_eq!(
            q.to_query(),
            vec![
                ("tags".to_owned(), "kos-cluster=a,kos-id=net".to_owned()),
                ("not-tags-any".to_owned(), "x".to_owned())
            ]
        );
        assert!(TagQuery::default().to_query().is_empty());
    }

    #[test]
    fn path_segments_escape_reserved_characters() {
        assert_eq!(path_segment("kos-cluster=a b/c"), "kos-cluster=a%20b%2Fc");
    }

    #[test]
    fn quota_remaining_handles_unlimited() {
        let q = QuotaUsage {
            limit: 10,
            used: 4,
            reserved: 1,
        };
        assert_eq!(q.remaining(), Some(5));
        assert_eq!(QuotaUsage { limit: -1, ..q }.remaining(), None);
    }
}
