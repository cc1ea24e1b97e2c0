//! A CRD's `x-kubernetes-validations`: the CEL rules apiextensions evaluates on every write of a
//! custom resource, for the part of CEL such rules are usually written in: `self` and `oldSelf`
//! with field selection, `has()`, `size()`, `!`, `&&`, `||`, parentheses, comparisons (`==`,
//! `!=`, `<`, `<=`, `>`, `>=`) between those and integer, string, boolean and `null` literals.
//! That covers every rule of the external-snapshotter's CRDs (snapshot.storage.k8s.io).
//!
//! Semantics as the real server's: a rule runs where it is declared, only when a value is there;
//! a rule naming `oldSelf` (a transition rule) only on an update whose old object has a value
//! there; on an update, a value equal to the old one is not checked again (ratcheting, on by
//! default since 1.30). A failure is a 422 cause at the value's path (or below it by the rule's
//! `fieldPath`), `Invalid value: "<type>": <message>` or as the rule's `reason` says (Forbidden,
//! Required, Duplicate); `messageExpression` is not evaluated: the rule's `message` is used, else
//! `failed rule: <rule>`. Values are correlated with their old ones through object properties
//! only, not list items. A rule outside this subset is not evaluated (the fake is then more
//! lenient than the real server for that rule): [`unsupported`] lists them so a test can assert
//! a CRD has none.

use serde_json::Value;

use crate::error::Cause;

/// Every rule of `schema` the evaluator cannot read.
pub fn unsupported(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_schema(schema, &mut |rule| {
        if parse(rule).is_none() {
            out.push(rule.to_owned());
        }
    });
    out
}

fn walk_schema(schema: &Value, f: &mut dyn FnMut(&str)) {
    for r in rules(schema) {
        if let Some(rule) = r.get("rule").and_then(Value::as_str) {
            f(rule);
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for s in props.values() {
            walk_schema(s, f);
        }
    }
    for k in ["items", "additionalProperties"] {
        if let Some(s) = schema.get(k).filter(|s| s.is_object()) {
            walk_schema(s, f);
        }
    }
}

fn rules(schema: &Value) -> &[Value] {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The failures of the rules in `schema` (a CRD version's `openAPIV3Schema`) on `obj`, `old`
/// being the stored object on an update.
pub fn check(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    // The root's rules see the whole object; its metadata is not walked.
    node(schema, obj, old, "", &mut out);
    out
}

fn node(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        return;
    }
    // Ratcheting: an unchanged value is not checked again.
    if old == Some(v) {
        return;
    }
    for r in rules(schema) {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else {
            continue;
        };
        let Some(expr) = parse(rule) else {
            continue;
        };
        if expr.uses_old() && old.is_none() {
            continue;
        }
        if eval(&expr, v, old) != Some(Val::Bool(true)) {
            let message = r
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| format!("failed rule: {rule}"), str::to_owned);
            // `fieldPath` (a relative `.a.b`) moves the error below the rule's value.
            let mut field = path.to_owned();
            if let Some(rel) = r.get("fieldPath").and_then(Value::as_str) {
                for part in rel.split('.').filter(|p| !p.is_empty()) {
                    field = if field.is_empty() {
                        part.to_owned()
                    } else {
                        format!("{field}.{part}")
                    };
                }
            }
            if field.is_empty() {
                field = "<nil>".into();
            }
            let shown = format!("\"{}\"", type_name(v));
            let (reason, message) = match r.get("reason").and_then(Value::as_str) {
                Some("FieldValueForbidden") => {
                    ("FieldValueForbidden", format!("Forbidden: {message}"))
                }
                Some("FieldValueRequired") => {
                    ("FieldValueRequired", format!("Required value: {message}"))
                }
                Some("FieldValueDuplicate") => {
                    ("FieldValueDuplicate", format!("Duplicate value: {shown}"))
                }
                _ => (
                    "FieldValueInvalid",
                    format!("Invalid value: {shown}: {message}"),
                ),
            };
            out.push(Cause {
                reason,
                field,
                message,
            });
        }
    }
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            for (k, child) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let Some(s) = props.and_then(|p| p.get(k)).or(extra) else {
                    continue;
                };
                let child_old = old.and_then(|o| o.get(k));
                let child_path = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                node(s, child, child_old, &child_path, out);
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    node(s, item, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Null => "null",
    }
}

// ------------------------------------------------------------------------------ the language

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    /// `self` or `oldSelf` (`old`) and the fields selected from it.
    Path {
        old: bool,
        fields: Vec<String>,
    },
    Has(Box<Expr>),
    Size(Box<Expr>),
    Int(i64),
    Str(String),
    Bool(bool),
    Null,
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(Op, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Expr {
    fn uses_old(&self) -> bool {
        match self {
            Expr::Path { old, .. } => *old,
            Expr::Has(e) | Expr::Size(e) | Expr::Not(e) => e.uses_old(),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(_, a, b) => a.uses_old() || b.uses_old(),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Int(i64),
    Str(String),
    Punct(&'static str),
}

fn lex(src: &str) -> Option<Vec<Tok>> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_owned()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push(Tok::Int(src[start..i].parse().ok()?));
        } else if c == b'\'' || c == b'"' {
            let end = src[i + 1..].find(c as char)? + i + 1;
            let text = &src[i + 1..end];
            if text.contains('\\') {
                return None;
            }
            out.push(Tok::Str(text.to_owned()));
            i = end + 1;
        } else {
            let two = src.get(i..i + 2).unwrap_or_default();
            let p = match two {
                "&&" => "&&",
                "||" => "||",
                "==" => "==",
                "!=" => "!=",
                "<=" => "<=",
                ">=" => ">=",
                _ => match c {
                    b'!' => "!",
                    b'(' => "(",
                    b')' => ")",
                    b'.' => ".",
                    b'<' => "<",
                    b'>' => ">",
                    _ => return None,
                },
            };
            i += p.len();
            out.push(Tok::Punct(p));
        }
    }
    Some(out)
}

fn parse(src: &str) -> Option<Expr> {
    let toks = lex(src)?;
    let mut p = Parser { toks, at: 0 };
    let e = p.or()?;
    (p.at == p.toks.len()).then_some(e)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(x)) if *x == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Option<Expr> {
        let mut e = self.and()?;
        while self.eat("||") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Some(e)
    }

    fn and(&mut self) -> Option<Expr> {
        let mut e = self.cmp()?;
        while self.eat("&&") {
            e = Expr::And(Box::new(e), Box::new(self.cmp()?));
        }
        Some(e)
    }

    fn cmp(&mut self) -> Option<Expr> {
        let a = self.unary()?;
        for (p, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
        ] {
            if self.eat(p) {
                return Some(Expr::Cmp(op, Box::new(a), Box::new(self.unary()?)));
            }
        }
        Some(a)
    }

    fn unary(&mut self) -> Option<Expr> {
        if self.eat("!") {
            return Some(Expr::Not(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Option<Expr> {
        let t = self.peek()?.clone();
        self.at += 1;
        match t {
            Tok::Punct("(") => {
                let e = self.or()?;
                self.eat(")").then_some(e)
            }
            Tok::Int(n) => Some(Expr::Int(n)),
            Tok::Str(s) => Some(Expr::Str(s)),
            Tok::Ident(id) => match id.as_str() {
                "true" => Some(Expr::Bool(true)),
                "false" => Some(Expr::Bool(false)),
                "null" => Some(Expr::Null),
                "self" | "oldSelf" => {
                    let mut fields = Vec::new();
                    while self.eat(".") {
                        match self.peek()?.clone() {
                            Tok::Ident(f) => {
                                self.at += 1;
                                fields.push(unescape(&f));
                            }
                            _ => return None,
                        }
                    }
                    Some(Expr::Path {
                        old: id == "oldSelf",
                        fields,
                    })
                }
                "has" | "size" => {
                    if !self.eat("(") {
                        return None;
                    }
                    let inner = self.or()?;
                    if !self.eat(")") {
                        return None;
                    }
                    if id == "has" {
                        // has() takes a field selection only.
                        match &inner {
                            Expr::Path { fields, .. } if !fields.is_empty() => {}
                            _ => return None,
                        }
                        Some(Expr::Has(Box::new(inner)))
                    } else {
                        Some(Expr::Size(Box::new(inner)))
                    }
                }
                _ => None,
            },
            Tok::Punct(_) => None,
        }
    }
}

/// CEL's escaping of property names: `__namespace__` is `namespace` (a reserved word),
/// `__dot__`, `__dash__`, `__slash__` and `__underscores__` stand for `.`, `-`, `/` and `__`.
fn unescape(f: &str) -> String {
    if let Some(inner) = f.strip_prefix("__").and_then(|x| x.strip_suffix("__"))
        && !inner.contains("__")
        && matches!(
            inner,
            "true"
                | "false"
                | "null"
                | "in"
                | "as"
                | "break"
                | "const"
                | "continue"
                | "else"
                | "for"
                | "function"
                | "if"
                | "import"
                | "let"
                | "loop"
                | "package"
                | "namespace"
                | "return"
                | "var"
                | "void"
                | "while"
        )
    {
        return inner.to_owned();
    }
    f.replace("__underscores__", "\u{0}")
        .replace("__dot__", ".")
        .replace("__dash__", "-")
        .replace("__slash__", "/")
        .replace('\u{0}', "__")
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Bool(bool),
    Int(i64),
    Json(Value),
}

/// `None` is an evaluation error (a missing field selected, a type mismatch): the rule fails,
/// as on the real server.
fn eval(e: &Expr, this: &Value, old: Option<&Value>) -> Option<Val> {
    match e {
        Expr::Path {
            old: is_old,
            fields,
        } => {
            let mut v = if *is_old { old? } else { this };
            for f in fields {
                v = v.get(f)?;
            }
            Some(match v {
                Value::Bool(b) => Val::Bool(*b),
                Value::Number(n) if n.is_i64() => Val::Int(n.as_i64()?),
                other => Val::Json(other.clone()),
            })
        }
        Expr::Has(inner) => {
            let Expr::Path {
                old: is_old,
                fields,
            } = inner.as_ref()
            else {
                return None;
            };
            let (last, init) = fields.split_last()?;
            let mut v = if *is_old { old? } else { this };
            for f in init {
                v = v.get(f)?;
            }
            Some(Val::Bool(v.as_object()?.contains_key(last)))
        }
        Expr::Size(inner) => Some(Val::Int(match eval(inner, this, old)? {
            Val::Json(Value::String(s)) => i64::try_from(s.chars().count()).ok()?,
            Val::Json(Value::Array(a)) => i64::try_from(a.len()).ok()?,
            Val::Json(Value::Object(m)) => i64::try_from(m.len()).ok()?,
            _ => return None,
        })),
        Expr::Int(n) => Some(Val::Int(*n)),
        Expr::Str(s) => Some(Val::Json(Value::String(s.clone()))),
        Expr::Bool(b) => Some(Val::Bool(*b)),
        Expr::Null => Some(Val::Json(Value::Null)),
        Expr::Not(inner) => match eval(inner, this, old)? {
            Val::Bool(b) => Some(Val::Bool(!b)),
            _ => None,
        },
        // CEL's logical operators are commutative over errors: one true side decides.
        Expr::And(a, b) => match (eval(a, this, old), eval(b, this, old)) {
            (Some(Val::Bool(false)), _) | (_, Some(Val::Bool(false))) => Some(Val::Bool(false)),
            (Some(Val::Bool(true)), Some(Val::Bool(true))) => Some(Val::Bool(true)),
            _ => None,
        },
        Expr::Or(a, b) => match (eval(a, this, old), eval(b, this, old)) {
            (Some(Val::Bool(true)), _) | (_, Some(Val::Bool(true))) => Some(Val::Bool(true)),
            (Some(Val::Bool(false)), Some(Val::Bool(false))) => Some(Val::Bool(false)),
            _ => None,
        },
        Expr::Cmp(op, a, b) => {
            let (a, b) = (eval(a, this, old)?, eval(b, this, old)?);
            let ord = match (&a, &b) {
                (Val::Int(x), Val::Int(y)) => Some(x.cmp(y)),
                (Val::Json(Value::String(x)), Val::Json(Value::String(y))) => Some(x.cmp(y)),
                _ => None,
            };
            Some(Val::Bool(match op {
                Op::Eq => a == b,
                Op::Ne => a != b,
                Op::Lt => ord? == std::cmp::Ordering::Less,
                Op::Le => ord? != std::cmp::Ordering::Greater,
                Op::Gt => ord? == std::cmp::Ordering::Greater,
                Op::Ge => ord? != std::cmp::Ordering::Less,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "source": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "!has(oldSelf.a) || has(self.a)", "message": "a is required once set"},
                    {"rule": "(has(self.a) && !has(self.b)) || (!has(self.a) && has(self.b))",
                     "message": "exactly one of a and b must be set"}],
                "properties": {
                    "a": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "a is immutable"}]},
                    "b": {"type": "string"}}},
            "className": {"type": "string", "x-kubernetes-validations": [{"rule": "size(self) > 0"}]},
            "ref": {"type": "object", "x-kubernetes-validations": [
                {"rule": "has(self.name) && has(self.__namespace__)", "message": "both"}]}}}}})
    }

    fn fields(c: &[Cause]) -> Vec<(String, String)> {
        c.iter()
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect()
    }

    #[test]
    fn one_of_and_size_rules_hold_on_create() {
        let ok = json!({"spec": {"source": {"a": "x"}, "className": "c", "ref": {"name": "n", "namespace": "ns"}}});
        assert!(check(&schema(), &ok, None).is_empty());
        let bad = json!({"spec": {"source": {"a": "x", "b": "y"}, "className": "", "ref": {"name": "n"}}});
        assert_eq!(
            fields(&check(&schema(), &bad, None)),
            [
                (
                    "spec.className".into(),
                    "Invalid value: \"string\": failed rule: size(self) > 0".into()
                ),
                ("spec.ref".into(), "Invalid value: \"object\": both".into()),
                (
                    "spec.source".into(),
                    "Invalid value: \"object\": exactly one of a and b must be set".into()
                ),
            ]
        );
    }

    #[test]
    fn transition_rules_run_on_updates_only_and_unchanged_values_ratchet() {
        let old = json!({"spec": {"source": {"a": "x"}}});
        let changed = json!({"spec": {"source": {"a": "y"}}});
        assert_eq!(
            fields(&check(&schema(), &changed, Some(&old))),
            [(
                "spec.source.a".into(),
                "Invalid value: \"string\": a is immutable".into()
            )]
        );
        let dropped = json!({"spec": {"source": {"b": "z"}}});
        assert_eq!(
            fields(&check(&schema(), &dropped, Some(&old))),
            [(
                "spec.source".into(),
                "Invalid value: \"object\": a is required once set".into()
            )]
        );
        // An object that was already invalid, unchanged, passes (ratcheting).
        let invalid = json!({"spec": {"className": ""}});
        assert!(check(&schema(), &invalid, Some(&invalid)).is_empty());
    }

    #[test]
    fn a_rules_reason_and_field_path_shape_its_error() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "has(self.a)", "message": "a please", "reason": "FieldValueRequired", "fieldPath": ".a"},
                {"rule": "!has(self.b)", "message": "no b", "reason": "FieldValueForbidden"}]}}});
        assert_eq!(
            fields(&check(&s, &json!({"spec": {"b": 1}}), None)),
            [
                ("spec.a".into(), "Required value: a please".into()),
                ("spec".into(), "Forbidden: no b".into()),
            ]
        );
    }

    #[test]
    fn rules_outside_the_subset_are_listed() {
        let s = json!({"x-kubernetes-validations": [
            {"rule": "self.all(x, x > 0)"}, {"rule": "self.a == oldSelf.a"}]});
        assert_eq!(unsupported(&s), ["self.all(x, x > 0)"]);
    }
}
