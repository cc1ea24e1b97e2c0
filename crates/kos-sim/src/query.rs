//! Query strings as OpenStack uses them: repeated keys (`?id=a&id=b`), comma lists, and the four tag
//! filters every tagging service shares.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// All query parameters in order, repeats kept.
#[derive(Debug, Clone, Default)]
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    pub fn parse(raw: Option<&str>) -> Self {
        QueryParams(
            url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A boolean filter (`true`/`false`, `1`/`0`, `True`), `None` when absent.
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key)
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))
    }

    pub fn tag_filter(&self) -> TagFilter {
        let list = |k: &str| -> Vec<String> {
            self.all(k)
                .iter()
                .flat_map(|v| v.split(','))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        TagFilter {
            tags: list("tags"),
            tags_any: list("tags-any"),
            not_tags: list("not-tags"),
            not_tags_any: list("not-tags-any"),
        }
    }

    /// `limit` and `marker` for list pagination.
    pub fn page(&self) -> PageRequest {
        PageRequest {
            limit: self.get("limit").and_then(|v| v.parse().ok()),
            marker: self.get("marker").map(str::to_owned),
            page_reverse: self.bool("page_reverse").unwrap_or(false),
        }
    }

    /// Re-encodes the parameters, minus the paging ones, for `next` links.
    pub fn without_paging(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter(|(k, _)| k != "marker" && k != "limit")
            .cloned()
            .collect()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(QueryParams::parse(parts.uri.query()))
    }
}

/// `tags` (all of), `tags-any`, `not-tags` (not all of), `not-tags-any` (none of): the Neutron, Nova and
/// Octavia filter semantics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagFilter {
    pub tags: Vec<String>,
    pub tags_any: Vec<String>,
    pub not_tags: Vec<String>,
    pub not_tags_any: Vec<String>,
}

impl TagFilter {
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
            && self.tags_any.is_empty()
            && self.not_tags.is_empty()
            && self.not_tags_any.is_empty()
    }

    pub fn matches<S: AsRef<str>>(&self, have: &[S]) -> bool {
        let has = |t: &String| have.iter().any(|h| h.as_ref() == t);
        (self.tags.is_empty() || self.tags.iter().all(has))
            && (self.tags_any.is_empty() || self.tags_any.iter().any(has))
            && (self.not_tags.is_empty() || !self.not_tags.iter().all(has))
            && (self.not_tags_any.is_empty() || !self.not_tags_any.iter().any(has))
    }
}

#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    pub limit: Option<usize>,
    pub marker: Option<String>,
    pub page_reverse: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_and_tag_filters() {
        let q = QueryParams::parse(Some(
            "id=a&id=b&tags=x,y&tags-any=z&not-tags-any=bad&limit=2&marker=m",
        ));
        assert_eq!(q.all("id"), vec!["a", "b"]);
        let f = q.tag_filter();
        assert_eq!(f.tags, vec!["x", "y"]);
        assert!(f.matches(&["x", "y", "z"]));
        assert!(!f.matches(&["x", "z"]), "tags needs all");
        assert!(!f.matches(&["x", "y"]), "tags-any needs one");
        assert!(!f.matches(&["x", "y", "z", "bad"]), "not-tags-any excludes");
        let nt = TagFilter {
            not_tags: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        assert!(
            nt.matches(&["a"]),
            "not-tags excludes only when all present"
        );
        assert!(!nt.matches(&["a", "b"]));
        let p = q.page();
        assert_eq!((p.limit, p.marker.as_deref()), (Some(2), Some("m")));
        assert_eq!(q.without_paging().len(), 5);
    }
}
