//! `labelSelector` and `fieldSelector`, parsed once per request and matched against stored objects.
//!
//! Label selectors take the full apimachinery grammar: `k`, `!k`, `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, comma-separated, all of which must hold. Field selectors take
//! `path=v`, `path==v`, `path!=v` on any dotted path of the object (`metadata.name`,
//! `spec.nodeName`, `involvedObject.name`); the real server accepts only a per-type list of fields,
//! so the fake is more lenient there, never stricter. A missing field compares as `""`, as in the
//! real server's field sets.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let bad = |why: &str| {
            ApiError::bad_request(format!(
                "unable to parse requirement: {why} (selector {s:?})"
            ))
        };
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(key.trim().to_owned()));
                continue;
            }
            if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelReq::NotIn(
                    k.trim().to_owned(),
                    vec![v.trim().to_owned()],
                ));
                continue;
            }
            if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                reqs.push(LabelReq::In(k.trim().to_owned(), vec![v.trim().to_owned()]));
                continue;
            }
            let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
            if let [key, rest] = words[..] {
                let rest = rest.trim();
                let (op, set) = if let Some(set) = rest.strip_prefix("notin") {
                    ("notin", set)
                } else if let Some(set) = rest.strip_prefix("in") {
                    ("in", set)
                } else {
                    return Err(bad("expected one of in, notin, =, ==, !="));
                };
                let set = set
                    .trim()
                    .strip_prefix('(')
                    .and_then(|x| x.strip_suffix(')'))
                    .ok_or_else(|| bad("expected a parenthesised set of values"))?;
                let values = set
                    .split(',')
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty())
                    .collect();
                let key = key.to_owned();
                reqs.push(if op == "in" {
                    LabelReq::In(key, values)
                } else {
                    LabelReq::NotIn(key, values)
                });
                continue;
            }
            reqs.push(LabelReq::Exists(part.to_owned()));
        }
        for r in &reqs {
            let key = match r {
                LabelReq::Exists(k)
                | LabelReq::NotExists(k)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _) => k,
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(bad("invalid label key"));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Against `metadata.labels` of `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            // As in apimachinery: a missing label satisfies `!=` and `notin`.
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
        })
    }
}

/// Commas inside `(…)` belong to a set, not to the list of requirements.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    path: Vec<String>,
    value: String,
    equal: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldReq>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, equal) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            reqs.push(FieldReq {
                path: path.trim().split('.').map(str::to_owned).collect(),
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut v = Some(obj);
            for seg in &r.path {
                v = v.and_then(|x| x.get(seg));
            }
            let actual = match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == r.value) == r.equal
        })
    }

    /// The name when the selector is exactly `metadata.name=<n>` (what kube-rs sends for a
    /// watch of one object): lets the store answer without a scan.
    pub fn single_name(&self) -> Option<&str> {
        match &self.0[..] {
            [r] if r.equal && r.path == ["metadata", "name"] => Some(&r.value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"nodeName": "w1"}})
    }

    #[test]
    fn label_selectors_follow_apimachinery() -> Result<(), ApiError> {
        let o = obj(json!({"a": "1", "b": "x"}));
        for (sel, want) in [
            ("", true),
            ("a", true),
            ("!a", false),
            ("!c", true),
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("c!=1", true),
            ("a in (1, 2)", true),
            ("a notin (1,2)", false),
            ("c notin (1)", true),
            ("a=1,b in (x,y)", true),
            ("a=1,b in (y,z)", false),
        ] {
            assert_eq!(LabelSelector::parse(sel)?.matches(&o), want, "{sel}");
        }
        assert!(LabelSelector::parse("a in 1").is_err());
        assert!(LabelSelector::parse("a b").is_err());
        Ok(())
    }

    #[test]
    fn field_selectors_walk_dotted_paths() -> Result<(), ApiError> {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=n1")?.matches(&o));
        assert!(!FieldSelector::parse("metadata.name!=n1")?.matches(&o));
        assert!(FieldSelector::parse("spec.nodeName==w1,metadata.name=n1")?.matches(&o));
        assert!(FieldSelector::parse("spec.missing=")?.matches(&o));
        assert_eq!(
            FieldSelector::parse("metadata.name=n1")?.single_name(),
            Some("n1")
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
        Ok(())
    }
}
