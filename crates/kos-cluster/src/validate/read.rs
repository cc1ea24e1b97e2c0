//! Reading the YAML tree field by field while collecting diagnostics, instead of stopping at the first one.
//!
//! Every reader returns `Option<T>`: `None` means a diagnostic was recorded, so the caller keeps reading its
//! other fields and only gives up on building its own value. Decoders read every field before combining them
//! with `?`, which is what makes "every problem at once" work.

use std::str::FromStr;

use miette::SourceSpan;

use crate::diagnostics::{Code, Diagnostic};
use crate::spec::Spanned;
use crate::tree::{Node, Value};

/// The diagnostics gathered so far, and the source text (for the raw spelling of plain scalars).
pub(crate) struct Cx<'s> {
    pub text: &'s str,
    pub diags: Vec<Diagnostic>,
}

impl Cx<'_> {
    pub fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// The source bytes of a span.
    fn raw(&self, span: SourceSpan) -> &str {
        self.text
            .get(span.offset()..span.offset() + span.len())
            .unwrap_or_default()
    }
}

/// One value in the document: its dotted path, its node, and the key it hangs from (for "missing" labels).
#[derive(Clone)]
pub(crate) struct Field<'a> {
    pub path: String,
    pub node: &'a Node,
    /// The key's span, or the node's own for list items and the document.
    pub at: SourceSpan,
}

impl<'a> Field<'a> {
    pub fn root(node: &'a Node) -> Self {
        Self {
            path: String::new(),
            node,
            at: node.span,
        }
    }

    pub fn span(&self) -> SourceSpan {
        self.node.span
    }

    fn child(&self, key: &str, node: &'a Node, at: SourceSpan) -> Self {
        let path = if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        };
        Self { path, node, at }
    }

    fn item(&self, index: usize, node: &'a Node) -> Self {
        Self {
            path: format!("{}[{index}]", self.path),
            node,
            at: node.span,
        }
    }

    /// Records "expected X, found Y" at this value.
    pub fn wrong_type<T>(&self, cx: &mut Cx<'_>, expected: &str) -> Option<T> {
        let found = self.node.value.kind();
        let mut d = Diagnostic::error(
            Code::WrongType,
            &self.path,
            format!("expected {expected}, found {found}"),
        )
        .label(self.span(), format!("this is {found}"));
        if let Value::Str(s) = &self.node.value
            && (s.parse::<i128>().is_ok() || s == "true" || s == "false")
        {
            d = d.help(format!("remove the quotes: `{s}`"));
        }
        cx.push(d);
        None
    }

    /// Passes `Ok` through; turns `Err` into a diagnostic on this value, worded by `message`.
    pub fn check<T, E>(
        &self,
        cx: &mut Cx<'_>,
        result: Result<T, E>,
        code: Code,
        label: &str,
        help: impl Into<String>,
        message: impl FnOnce(E) -> String,
    ) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => self.invalid(cx, code, message(e), label, help),
        }
    }

    /// Records an invalid value with the label on this value.
    pub fn invalid<T>(
        &self,
        cx: &mut Cx<'_>,
        code: Code,
        message: impl std::fmt::Display,
        label: &str,
        help: impl Into<String>,
    ) -> Option<T> {
        cx.push(
            Diagnostic::error(code, &self.path, message)
                .label(self.span(), label)
                .help(help),
        );
        None
    }
}

/// A mapping whose keys have been checked against its schema.
pub(crate) struct Obj<'a> {
    field: Field<'a>,
    entries: &'a [(Node, Node)],
}

impl<'a> Obj<'a> {
    /// Reads `field` as a mapping with the keys `known`, reporting unknown and repeated keys.
    pub fn new(cx: &mut Cx<'_>, field: &Field<'a>, known: &[&str]) -> Option<Self> {
        let field = field.clone();
        let Value::Map(entries) = &field.node.value else {
            return field.wrong_type(cx, "a mapping");
        };
        for (i, (key, _)) in entries.iter().enumerate() {
            let name = key_text(cx, key);
            if entries[..i].iter().any(|(k, _)| key_text(cx, k) == name) {
                cx.push(
                    Diagnostic::error(
                        Code::DuplicateField,
                        &field.child(&name, key, key.span).path,
                        "is given twice",
                    )
                    .label(key.span, "repeated key")
                    .help("keep one of the two"),
                );
            } else if !known.contains(&name.as_str()) {
                let path = field.child(&name, key, key.span).path;
                let help = match did_you_mean(&name, known) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("known fields here: {}", backticked(known)),
                };
                cx.push(
                    Diagnostic::error(Code::UnknownField, &path, "unknown field")
                        .label(key.span, "unknown field")
                        .help(help),
                );
            }
        }
        Some(Self { field, entries })
    }

    pub fn path(&self) -> &str {
        &self.field.path
    }

    /// The span to blame for things missing from this mapping: its key.
    pub fn at(&self) -> SourceSpan {
        self.field.at
    }

    /// The field `key`, if present and not null (`key:` with no value counts as absent).
    pub fn get(&self, cx: &Cx<'_>, key: &str) -> Option<Field<'a>> {
        self.entries
            .iter()
            .find(|(k, v)| key_text(cx, k) == key && !matches!(v.value, Value::Null))
            .map(|(k, v)| self.field.child(key, v, k.span))
    }

    /// The span of `key` itself, if present.
    pub fn key_span(&self, cx: &Cx<'_>, key: &str) -> Option<SourceSpan> {
        self.entries
            .iter()
            .find(|(k, _)| key_text(cx, k) == key)
            .map(|(k, _)| k.span)
    }

    /// A required field.
    pub fn req<T>(
        &self,
        cx: &mut Cx<'_>,
        key: &str,
        read: impl FnOnce(&mut Cx<'_>, &Field<'a>) -> Option<T>,
    ) -> Option<T> {
        if let Some(f) = self.get(cx, key) {
            return read(cx, &f);
        }
        let what = if self.path().is_empty() {
            "the document".to_owned()
        } else {
            format!("`{}`", self.path())
        };
        let path = self.field.child(key, self.field.node, self.at()).path;
        cx.push(
            Diagnostic::error(Code::MissingField, &path, format!("missing in {what}"))
                .label(self.at(), format!("`{key}` is required here"))
                .help(format!("add `{key}:` to {what}")),
        );
        None
    }

    /// An optional field: `Some(None)` when absent, `None` when present but invalid.
    pub fn opt<T>(
        &self,
        cx: &mut Cx<'_>,
        key: &str,
        read: impl FnOnce(&mut Cx<'_>, &Field<'a>) -> Option<T>,
    ) -> Option<Option<T>> {
        match self.get(cx, key) {
            Some(f) => read(cx, &f).map(Some),
            None => Some(None),
        }
    }

    /// An optional field with a default.
    pub fn or<T>(
        &self,
        cx: &mut Cx<'_>,
        key: &str,
        default: T,
        read: impl FnOnce(&mut Cx<'_>, &Field<'a>) -> Option<T>,
    ) -> Option<T> {
        self.opt(cx, key, read).map(|v| v.unwrap_or(default))
    }
}

/// The key as text: plain scalars keep their spelling (`1.30`, `null`), whatever type YAML gives them.
pub(crate) fn key_text(cx: &Cx<'_>, key: &Node) -> String {
    match &key.value {
        Value::Str(s) => s.clone(),
        _ => cx.raw(key.span).to_owned(),
    }
}

/// A scalar as text: strings as they are, numbers and booleans as spelled (so a flavor `1` or a label value
/// `true` are read as text, the way Kubernetes and Nova see them).
pub(crate) fn scalar(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<String>> {
    match &f.node.value {
        Value::Str(s) => Some(Spanned::new(s.clone(), f.span())),
        Value::Int(_) | Value::Float | Value::Bool(_) => {
            Some(Spanned::new(cx.raw(f.span()).to_owned(), f.span()))
        }
        _ => f.wrong_type(cx, "a string"),
    }
}

/// A non-empty string.
pub(crate) fn string(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<String>> {
    let s = scalar(cx, f)?;
    if s.value.trim().is_empty() {
        return f.invalid(
            cx,
            Code::InvalidValue,
            "must not be empty",
            "empty",
            "give a value or remove the field",
        );
    }
    Some(s)
}

/// A whole number in `range`; quoted numbers are a type error (YAML tools disagree on them).
pub(crate) fn integer(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    range: std::ops::RangeInclusive<u32>,
    code: Code,
    help: &str,
) -> Option<Spanned<u32>> {
    let Value::Int(n) = f.node.value else {
        return f.wrong_type(cx, "a whole number");
    };
    match u32::try_from(n) {
        Ok(n) if range.contains(&n) => Some(Spanned::new(n, f.span())),
        _ => f.invalid(
            cx,
            code,
            format!(
                "{n} is out of range; it must be {}–{}",
                range.start(),
                range.end()
            ),
            "out of range",
            help,
        ),
    }
}

pub(crate) fn boolean(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<bool> {
    match f.node.value {
        Value::Bool(b) => Some(b),
        _ => f.wrong_type(cx, "`true` or `false`"),
    }
}

/// Every item of a list, each read even when another fails.
pub(crate) fn list<'a, T>(
    cx: &mut Cx<'_>,
    f: &Field<'a>,
    mut read: impl FnMut(&mut Cx<'_>, &Field<'a>) -> Option<T>,
) -> Option<Vec<T>> {
    let Value::Seq(items) = &f.node.value else {
        return f.wrong_type(cx, "a list");
    };
    let read: Vec<Option<T>> = items
        .iter()
        .enumerate()
        .map(|(i, node)| read(cx, &f.item(i, node)))
        .collect();
    read.into_iter().collect()
}

/// One of a fixed set of spellings.
pub(crate) fn choice<T: Copy>(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    options: &[(&str, T)],
) -> Option<Spanned<T>> {
    let s = scalar(cx, f)?;
    if let Some((_, v)) = options.iter().find(|(name, _)| *name == s.value) {
        return Some(Spanned::new(*v, s.span));
    }
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let help = match did_you_mean(&s.value, &names) {
        Some(n) => format!("did you mean `{n}`?"),
        None => format!("use one of {}", backticked(&names)),
    };
    f.invalid(
        cx,
        Code::InvalidValue,
        format!("`{}` is not one of {}", s.value, backticked(&names)),
        "unknown value",
        help,
    )
}

/// A value parsed from a string with `FromStr`, e.g. an IP address.
pub(crate) fn parsed<T: FromStr>(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    code: Code,
    what: &str,
    example: &str,
) -> Option<Spanned<T>> {
    let s = scalar(cx, f)?;
    match s.value.trim().parse() {
        Ok(v) => Some(Spanned::new(v, s.span)),
        Err(_) => f.invalid(
            cx,
            code,
            format!("`{}` is not {what}", s.value),
            format!("not {what}").as_str(),
            format!("write {what}, e.g. `{example}`"),
        ),
    }
}

/// The known name closest to `given`: same letters in another case, or a small edit away.
pub(crate) fn did_you_mean<'k>(given: &str, known: &[&'k str]) -> Option<&'k str> {
    if let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(given)) {
        return Some(k);
    }
    let lower = given.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (levenshtein(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

pub(crate) fn backticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_cover_case_and_typos_but_not_strangers() {
        let known = ["nodePools", "podCIDR", "controlPlane"];
        assert_eq!(did_you_mean("podCidr", &known), Some("podCIDR"));
        assert_eq!(did_you_mean("nodePool", &known), Some("nodePools"));
        assert_eq!(did_you_mean("controlplanes", &known), Some("controlPlane"));
        assert_eq!(did_you_mean("workers", &known), None);
    }
}
