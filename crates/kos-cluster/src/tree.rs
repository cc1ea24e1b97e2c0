//! The YAML document as a tree of nodes with byte spans.
//!
//! serde stops at the first error, but kos reports every problem at once. So serde-saphyr only parses the text
//! into this untyped tree (its `Spanned` wrapper gives each node's location), and `validate` walks the tree,
//! collecting one diagnostic per problem. Duplicate keys are passed through and reported there too.

use std::fmt;

use miette::SourceSpan;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Location, Spanned as Saphyr};

use crate::diagnostics::{Code, Diagnostic};

/// A YAML node and where it is.
#[derive(Debug)]
pub(crate) struct Node {
    pub value: Value,
    /// Bytes of the node in the source; quoted strings include their quotes, block mappings are empty spans.
    pub span: SourceSpan,
}

#[derive(Debug)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    /// The number itself is not kept: a float in a spec is read by its spelling (`1.30`).
    Float,
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// How the value is named in "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Null => "nothing (null)",
            Self::Bool(_) => "a boolean",
            Self::Int(_) => "an integer",
            Self::Float => "a number",
            Self::Str(_) => "a string",
            Self::Seq(_) => "a list",
            Self::Map(_) => "a mapping",
        }
    }
}

/// Parses `text` into a tree; a syntax error becomes the single diagnostic (nothing else can be checked).
pub(crate) fn parse(text: &str) -> Result<Node, Diagnostic> {
    // YAML 1.2 booleans only: `public: yes` or a pool called `no` must not silently become a bool.
    // A spec is a few hundred values: a budget far below the parser's own stops an alias bomb (anchors
    // whose aliases multiply) after a moment and a few megabytes, not seconds and hundreds.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = MAX_NODES;
    budget.max_aliases = 1_000;
    budget.max_events = 4 * MAX_NODES;
    let options = serde_saphyr::options! {
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        budget: Some(budget),
    };
    match serde_saphyr::from_str_with_options::<Saphyr<Raw>>(text, options) {
        Ok(root) => Ok(convert(root, text)),
        Err(err) => {
            let span = err
                .location()
                .map_or(SourceSpan::from(0..0), |l| span_of(&l, text));
            let (message, label, help) = match kind(&err) {
                Problem::Expansion => (
                    format!(
                        "the document expands to more than {MAX_NODES} values, far more than a cluster spec \
                         holds: its aliases (`*name`) repeat what their anchors (`&name`) hold, over and over"
                    ),
                    "the expansion got out of hand here".to_owned(),
                    "write the values out, or use anchors and aliases sparingly; nothing else was checked",
                ),
                Problem::Documents => (
                    "the file holds more than one YAML document (a `---` line starts another)"
                        .to_owned(),
                    "a second document starts here".to_owned(),
                    "kos reads one cluster per file: put each document in a file of its own, or delete the \
                     extra `---`; nothing else was checked",
                ),
                Problem::Syntax => {
                    let m = syntax_message(&err);
                    (
                        format!("not valid YAML: {m}"),
                        m,
                        "fix the YAML syntax; nothing else was checked",
                    )
                }
            };
            Err(Diagnostic::error(Code::Syntax, "", message)
                .label(span, label)
                .help(help))
        }
    }
}

/// More values than any cluster spec needs (each pool is a dozen).
const MAX_NODES: usize = 20_000;

/// What kind of parse failure, for the message a person reads.
enum Problem {
    /// Aliases multiplying past the budget.
    Expansion,
    /// `---` and a second document.
    Documents,
    Syntax,
}

fn kind(err: &serde_saphyr::Error) -> Problem {
    use serde_saphyr::Error as E;
    let mut e = err;
    while let E::AliasError { error, .. } | E::WithSnippet { error, .. } = e {
        e = error;
    }
    match e {
        E::Budget { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::AliasReplayCounterOverflow { .. } => Problem::Expansion,
        E::MultipleDocuments { .. } => Problem::Documents,
        _ => Problem::Syntax,
    }
}

/// serde-saphyr's `Display` embeds its own location and snippet; miette draws ours, so keep the first line and
/// drop the `error: line L column C:` prefix.
fn syntax_message(err: &serde_saphyr::Error) -> String {
    let text = err.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") => rest.to_owned(),
        _ => first.to_owned(),
    }
}

/// Byte span of a location; parser errors carry only character positions, so fall back to line and column.
fn span_of(loc: &Location, text: &str) -> SourceSpan {
    let span = loc.span();
    if let (Some(off), Some(len)) = (span.byte_offset(), span.byte_len()) {
        return SourceSpan::from((to_usize(off), to_usize(len)));
    }
    let line_start = text
        .split_inclusive('\n')
        .take(to_usize(loc.line().saturating_sub(1)))
        .map(str::len)
        .sum::<usize>();
    let col = to_usize(loc.column().saturating_sub(1));
    let offset = text[line_start.min(text.len())..]
        .char_indices()
        .nth(col)
        .map_or(text.len(), |(i, _)| line_start + i);
    let len = text[offset..].chars().next().map_or(0, char::len_utf8);
    SourceSpan::from((offset, len))
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn convert(node: Saphyr<Raw>, text: &str) -> Node {
    let span = span_of(&node.referenced, text);
    let value = match node.value {
        Raw::Null => Value::Null,
        Raw::Bool(b) => Value::Bool(b),
        Raw::Int(i) => Value::Int(i),
        Raw::Float => Value::Float,
        Raw::Str(s) => Value::Str(s),
        Raw::Seq(items) => Value::Seq(items.into_iter().map(|n| convert(n, text)).collect()),
        Raw::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (convert(k, text), convert(v, text)))
                .collect(),
        ),
    };
    Node { value, span }
}

/// What serde-saphyr hands us: children wrapped in its `Spanned` so each carries its location.
enum Raw {
    Null,
    Bool(bool),
    Int(i128),
    Float,
    Str(String),
    Seq(Vec<Saphyr<Raw>>),
    Map(Vec<(Saphyr<Raw>, Saphyr<Raw>)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        Raw::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Raw, E> {
        Ok(Raw::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Raw, E> {
        Ok(Raw::Float)
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Raw::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Raw::Map(entries))
    }
}
