//! A CRD's `x-kubernetes-validations`: the CEL rules apiextensions compiles when a CRD is written
//! and evaluates on every write of a custom resource, run here with the `cel` crate (CEL's
//! standard library and macros) plus the Kubernetes library functions in [`library`].
//!
//! Semantics as the real server's: a rule runs where it is declared, only when a value is there;
//! a rule naming `oldSelf` (a transition rule) only on an update whose old object has a value
//! there; on an update, a value equal to the old one is not checked again (ratcheting, on by
//! default since 1.30). A failure is a 422 cause at the value's path (or below it by the rule's
//! `fieldPath`), `Invalid value: "<type>": <message>` or as the rule's `reason` says (Forbidden,
//! Required, Duplicate); the message is the rule's `messageExpression`'s value when it gives a
//! non-empty string, else its `message`, else `failed rule: <rule>`. Object properties are seen
//! under their escaped names (`namespace` as `__namespace__`, `a-b` as `a__dash__b`), as
//! apiextensions escapes them. Values are correlated with their old ones through object
//! properties only, not list items.
//!
//! On a CRD's write, [`compile_errors`] refuses a rule or message expression that does not parse
//! or names a variable other than `self`/`oldSelf` or a function the fake does not know (the
//! real server knows more functions than the fake implements; such a CRD is refused here, which
//! keeps the fake from being more lenient than the real server). The cost estimate the real server
//! makes is not computed; a macro over a list or map without a bound, which is always over budget,
//! is refused with the real message. Rules are not type-checked as cel-go checks them (the `cel`
//! crate is dynamically typed): a rule comparing an integer with a string compiles here.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr};
use cel::objects::Key;
use cel::{Context, Env, IdedExpr, Program, Value as Cel};
use serde_json::Value;

use crate::error::Cause;

pub mod library;

/// CEL's standard library and the strings extension (which the Kubernetes environment has,
/// `ext.Strings` version 2), shared by every evaluation.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Only fails on a name declared twice, which the two never do.
    if let Err(e) = env.add_extension(cel::extensions::strings) {
        tracing::error!(error = %e, "CEL strings extension not added");
    }
    Arc::new(env)
});

/// The functions a rule may call: CEL's standard ones the `cel` crate implements, and the
/// Kubernetes library functions of [`library`]. Operators (`_==_`, `@in`, …) are always known.
const STANDARD: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    // ext.Strings version 2, in every supported minor's base environment (`format`, `quote`
    // and `reverse` are left out: not in all of them, or not as the `cel` crate has them).
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "join",
];

fn known_function(name: &str) -> bool {
    name.starts_with('_')
        || name.starts_with('@')
        || name.starts_with('!')
        || STANDARD.contains(&name)
        || library::FUNCTIONS.contains(&name)
}

/// A rule compiled, or why it cannot be.
fn compile(source: &str) -> Result<Arc<Program>, String> {
    thread_local! {
        static CACHE: std::cell::RefCell<HashMap<String, Arc<Program>>> =
            std::cell::RefCell::new(HashMap::new());
    }
    if let Some(p) = CACHE.with(|c| c.borrow().get(source).cloned()) {
        return Ok(p);
    }
    let program = ENV
        .compile(source)
        .map_err(|e| format!("compilation failed: ERROR: <input>: {e}"))?;
    let (mut vars, mut funcs) = (Vec::new(), Vec::new());
    free_references(program.expression(), &mut Vec::new(), &mut vars, &mut funcs);
    if let Some(v) = vars
        .iter()
        .find(|v| !matches!(v.as_str(), "self" | "oldSelf"))
    {
        return Err(format!(
            "compilation failed: ERROR: <input>: undeclared reference to '{v}' (in container '')"
        ));
    }
    if let Some(f) = funcs.iter().find(|f| !known_function(f)) {
        return Err(format!(
            "compilation failed: ERROR: <input>: undeclared reference to '{f}' (in container '')"
        ));
    }
    let program = Arc::new(program);
    CACHE.with(|c| {
        c.borrow_mut()
            .insert(source.to_owned(), Arc::clone(&program))
    });
    Ok(program)
}

fn uses_old(program: &Program) -> bool {
    let (mut vars, mut funcs) = (Vec::new(), Vec::new());
    free_references(program.expression(), &mut Vec::new(), &mut vars, &mut funcs);
    vars.iter().any(|v| v == "oldSelf")
}

/// The variables an expression reads that no comprehension (a macro's `x`) binds, and the
/// functions it calls. The `cel` crate's own `references` counts a macro's variables as free.
fn free_references(
    e: &IdedExpr,
    bound: &mut Vec<String>,
    vars: &mut Vec<String>,
    funcs: &mut Vec<String>,
) {
    match &e.expr {
        Expr::Call(c) => {
            funcs.push(c.func_name.clone());
            if let Some(t) = &c.target {
                free_references(t, bound, vars, funcs);
            }
            for a in &c.args {
                free_references(a, bound, vars, funcs);
            }
        }
        Expr::Comprehension(c) => {
            free_references(&c.iter_range, bound, vars, funcs);
            free_references(&c.accu_init, bound, vars, funcs);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                free_references(x, bound, vars, funcs);
            }
            bound.truncate(depth);
        }
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) && !TYPES.contains(&name.as_str()) {
                vars.push(name.clone());
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                free_references(x, bound, vars, funcs);
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => free_references(&f.value, bound, vars, funcs),
                    EntryExpr::MapEntry(m) => {
                        free_references(&m.key, bound, vars, funcs);
                        free_references(&m.value, bound, vars, funcs);
                    }
                }
            }
        }
        Expr::Select(s) => free_references(&s.operand, bound, vars, funcs),
        // A message literal names a type the Kubernetes environment does not declare.
        Expr::Struct(s) => vars.push(s.type_name.clone()),
        Expr::Unspecified | Expr::Literal(_) => {}
    }
}

/// Type names a rule may use as values (`type(self.x) == string`).
const TYPES: &[&str] = &[
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// The causes apiextensions gives a CRD version's schema (at `path`, e.g.
/// `spec.versions[0].schema.openAPIV3Schema`) whose rules do not compile.
pub fn compile_errors(schema: &Value, path: &str, out: &mut Vec<Cause>) {
    for (i, r) in rules(schema).iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
        if rule.trim().is_empty() {
            out.push(Cause {
                reason: "FieldValueRequired",
                field: format!("{at}.rule"),
                message: "Required value: rule is not specified".into(),
            });
            continue;
        }
        let shown = rule_struct(r);
        rule_fields(schema, r, &at, out);
        match compile(rule) {
            Err(e) => out.push(Cause {
                reason: "FieldValueInvalid",
                field: format!("{at}.rule"),
                message: format!("Invalid value: {shown}: {e}"),
            }),
            Ok(p) => {
                if let Some(e) = undeclared_field(p.expression(), schema, &mut Vec::new()) {
                    out.push(Cause {
                        reason: "FieldValueInvalid",
                        field: format!("{at}.rule"),
                        message: format!(
                            "Invalid value: {shown}: compilation failed: ERROR: <input>: {e}"
                        ),
                    });
                } else if iterates_unbounded(p.expression(), schema, &mut Vec::new()) {
                    out.push(Cause {
                        reason: "FieldValueForbidden",
                        field: format!("{at}.rule"),
                        message: format!("Forbidden: {COST}"),
                    });
                }
            }
        }
        if let Some(m) = r.get("messageExpression").and_then(Value::as_str)
            && !m.trim().is_empty()
        {
            match compile(m) {
                Err(e) => out.push(Cause {
                    reason: "FieldValueInvalid",
                    field: format!("{at}.messageExpression"),
                    message: format!("Invalid value: {shown}: messageExpression {e}"),
                }),
                Ok(p) if undeclared_field(p.expression(), schema, &mut Vec::new()).is_some() => {
                    let e = undeclared_field(p.expression(), schema, &mut Vec::new())
                        .unwrap_or_default();
                    out.push(Cause {
                        reason: "FieldValueInvalid",
                        field: format!("{at}.messageExpression"),
                        message: format!(
                            "Invalid value: {shown}: messageExpression compilation failed: ERROR: <input>: {e}"
                        ),
                    });
                }
                Ok(p) if iterates_unbounded(p.expression(), schema, &mut Vec::new()) => {
                    out.push(Cause {
                        reason: "FieldValueForbidden",
                        field: format!("{at}.messageExpression"),
                        message: format!(
                            "Forbidden: {}",
                            COST.replacen("rule cost", "messageExpression cost", 1)
                        ),
                    });
                }
                Ok(_) => {}
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            compile_errors(s, &format!("{path}.properties[{k}]"), out);
        }
    }
    for k in ["items", "additionalProperties"] {
        if let Some(s) = schema.get(k).filter(|s| s.is_object()) {
            compile_errors(s, &format!("{path}.{k}"), out);
        }
    }
}

/// The real server estimates a rule's cost from the bounds of what it reads and refuses one over
/// its budget. The fake does not estimate: it refuses the case that always exceeds it, a macro
/// (`all`, `exists`, `map`, …) over a list without `maxItems` or a map without `maxProperties`,
/// with the real message (its factor not computed).
const COST: &str = "estimated rule cost exceeds budget by factor of more than 100x (try simplifying \
    the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are \
    declared)";

/// Whether a comprehension in `e` ranges over a value whose schema (followed from `self`, or from
/// an enclosing comprehension's variable, through fields and indexes) is an unbounded list or map.
fn iterates_unbounded<'a>(
    e: &IdedExpr,
    this: &'a Value,
    vars: &mut Vec<(String, &'a Value)>,
) -> bool {
    match &e.expr {
        Expr::Comprehension(c) => {
            let range = schema_of(&c.iter_range, this, vars);
            if let Some(r) = range {
                let list = r.get("type").and_then(Value::as_str) == Some("array")
                    && r.get("maxItems").is_none();
                let map = r.get("additionalProperties").is_some_and(Value::is_object)
                    && r.get("maxProperties").is_none();
                if list || map {
                    return true;
                }
            }
            let depth = vars.len();
            if let Some(item) = range.and_then(|r| {
                r.get("items")
                    .or_else(|| r.get("additionalProperties").filter(|s| s.is_object()))
            }) {
                vars.push((c.iter_var.clone(), item));
            }
            let inner = [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
            .into_iter()
            .any(|x| iterates_unbounded(x, this, vars));
            vars.truncate(depth);
            inner
        }
        Expr::Call(c) => {
            c.target
                .as_ref()
                .is_some_and(|t| iterates_unbounded(t, this, vars))
                || c.args.iter().any(|a| iterates_unbounded(a, this, vars))
        }
        Expr::Select(s) => iterates_unbounded(&s.operand, this, vars),
        Expr::List(l) => l.elements.iter().any(|x| iterates_unbounded(x, this, vars)),
        _ => false,
    }
}

/// A field a rule selects (`self.a`, `has(self.a)`, `x.a` on a macro's variable) that the value's
/// type does not declare, as cel-go's type check finds it: a property the object's schema does not
/// list, or one whose schema has no `type` (a `x-kubernetes-preserve-unknown-fields` value that is
/// not `x-kubernetes-int-or-string`: apiextensions gives CEL no type for it, so rules cannot see
/// it). The message is cel-go's.
fn undeclared_field<'a>(
    e: &IdedExpr,
    this: &'a Value,
    vars: &mut Vec<(String, &'a Value)>,
) -> Option<String> {
    match &e.expr {
        Expr::Select(s) => {
            if let Some(base) = schema_of(&s.operand, this, vars)
                && let Some(props) = base.get("properties").and_then(Value::as_object)
                && !base
                    .get("additionalProperties")
                    .is_some_and(Value::is_object)
                && !matches!(s.field.as_str(), "apiVersion" | "kind" | "metadata")
            {
                let declared = props
                    .iter()
                    .find(|(k, _)| escape(k).as_deref() == Some(s.field.as_str()))
                    .map(|(_, v)| v);
                let typed = declared.is_some_and(|v| {
                    v.get("type").is_some() || v.get("x-kubernetes-int-or-string").is_some()
                });
                if !typed {
                    return Some(format!("undefined field '{}'", s.field));
                }
            }
            undeclared_field(&s.operand, this, vars)
        }
        Expr::Comprehension(c) => {
            if let Some(x) = undeclared_field(&c.iter_range, this, vars) {
                return Some(x);
            }
            let depth = vars.len();
            if let Some(item) = schema_of(&c.iter_range, this, vars).and_then(|r| {
                r.get("items")
                    .or_else(|| r.get("additionalProperties").filter(|s| s.is_object()))
            }) {
                vars.push((c.iter_var.clone(), item));
            }
            let found = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .find_map(|x| undeclared_field(x, this, vars));
            vars.truncate(depth);
            found
        }
        Expr::Call(c) => c
            .target
            .iter()
            .map(|t| t.as_ref())
            .chain(c.args.iter())
            .find_map(|a| undeclared_field(a, this, vars)),
        Expr::List(l) => l
            .elements
            .iter()
            .find_map(|x| undeclared_field(x, this, vars)),
        _ => None,
    }
}

/// The schema of a `self.a.b` / `x.a[0]` expression, when it can be followed.
fn schema_of<'a>(e: &IdedExpr, this: &'a Value, vars: &[(String, &'a Value)]) -> Option<&'a Value> {
    match &e.expr {
        Expr::Ident(name) if name == "self" => Some(this),
        Expr::Ident(name) => vars.iter().rev().find(|(v, _)| v == name).map(|(_, s)| *s),
        Expr::Select(s) => {
            let base = schema_of(&s.operand, this, vars)?;
            base.get("properties")
                .and_then(Value::as_object)
                .and_then(|p| {
                    p.iter()
                        .find(|(k, _)| escape(k).as_deref() == Some(s.field.as_str()))
                        .map(|(_, v)| v)
                })
                .or_else(|| base.get("additionalProperties").filter(|s| s.is_object()))
        }
        Expr::Call(c) if c.func_name == "_[_]" => {
            let base = schema_of(c.args.first()?, this, vars)?;
            base.get("items")
                .or_else(|| base.get("additionalProperties").filter(|s| s.is_object()))
        }
        _ => None,
    }
}

/// apiextensions' checks of a rule's other fields: `message`, `messageExpression`, `reason`,
/// `fieldPath`.
fn rule_fields(schema: &Value, r: &Value, at: &str, out: &mut Vec<Cause>) {
    let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    let invalid = |field: &str, value: &str, why: &str| Cause {
        reason: "FieldValueInvalid",
        field: format!("{at}.{field}"),
        message: format!("Invalid value: {value:?}: {why}"),
    };
    let (rule, message, expr, path) = (
        text("rule").trim(),
        text("message"),
        text("messageExpression"),
        text("fieldPath"),
    );
    if !message.is_empty() && message.trim().is_empty() {
        out.push(invalid(
            "message",
            message,
            "message must be non-empty if specified",
        ));
    } else if message.trim().contains(['\n', '\r']) {
        out.push(invalid(
            "message",
            message,
            "message must not contain line breaks",
        ));
    } else if rule.contains(['\n', '\r']) && message.trim().is_empty() && expr.trim().is_empty() {
        out.push(Cause {
            reason: "FieldValueRequired",
            field: format!("{at}.message"),
            message: "Required value: message must be specified if rule contains line breaks"
                .into(),
        });
    }
    if !expr.is_empty() && expr.trim().is_empty() {
        out.push(Cause {
            reason: "FieldValueRequired",
            field: format!("{at}.messageExpression"),
            message: "Required value: messageExpression must be non-empty if specified".into(),
        });
    }
    if let Some(reason) = r.get("reason").and_then(Value::as_str)
        && !REASONS.contains(&reason)
    {
        out.push(Cause {
            reason: "FieldValueNotSupported",
            field: format!("{at}.reason"),
            message: format!(
                "Unsupported value: {reason:?}: supported values: {}",
                REASONS.map(|r| format!("{r:?}")).join(", ")
            ),
        });
    }
    if !path.is_empty() && path.trim().is_empty() {
        out.push(invalid(
            "fieldPath",
            path,
            "fieldPath must be non-empty if specified",
        ));
    } else if path.contains(['\n', '\r']) {
        out.push(invalid(
            "fieldPath",
            path,
            "fieldPath must not contain line breaks",
        ));
    } else if !path.is_empty() && !field_path_valid(schema, path.trim()) {
        out.push(invalid("fieldPath", path, "fieldPath must be a valid path"));
    }
}

/// The `reason`s a rule may give (apiextensions' `supportedValidationReason`), sorted.
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// Whether a rule's relative `fieldPath` (`.a.b`, `.a['b']`, `.list[0]`) names a place the
/// schema has.
fn field_path_valid(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            let Some(next) = child(node, name) else {
                return false;
            };
            node = next;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return false;
            };
            let key = &after[..end];
            let quoted = key
                .strip_prefix('\'')
                .and_then(|k| k.strip_suffix('\''))
                .or_else(|| key.strip_prefix('"').and_then(|k| k.strip_suffix('"')));
            let next = match quoted {
                Some(name) => child(node, name),
                None if key.parse::<usize>().is_ok() => node.get("items"),
                None => None,
            };
            let Some(next) = next else {
                return false;
            };
            node = next;
            rest = &after[end + 1..];
        } else {
            return false;
        }
    }
    true
}

fn child<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
    if name.is_empty() {
        return None;
    }
    node.get("properties")
        .and_then(|p| p.get(name))
        .or_else(|| node.get("additionalProperties").filter(|s| s.is_object()))
}

/// A rule as Go's `%#v` prints apiextensions' `ValidationRule`, as the real server's message
/// shows it.
fn rule_struct(r: &Value) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    let reason = r.get("reason").and_then(Value::as_str).map_or_else(
        || "(*apiextensions.FieldValueErrorReason)(nil)".to_owned(),
        |v| format!("(*apiextensions.FieldValueErrorReason)({v:?})"),
    );
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{reason}, FieldPath:{:?}, OptionalOldSelf:(*bool)(nil)}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
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

/// Runs `program` with `self` (and `oldSelf`) bound.
fn run(program: &Program, this: &Cel, old: Option<&Cel>) -> Result<Cel, String> {
    let mut cx = Context::with_env(Arc::clone(&ENV));
    library::register(&mut cx);
    cx.add_variable_from_value("self", this.clone());
    if let Some(o) = old {
        cx.add_variable_from_value("oldSelf", o.clone());
    }
    program.execute(&cx).map_err(|e| e.to_string())
}

fn node(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        return;
    }
    // Ratcheting: an unchanged value is not checked again.
    if old == Some(v) {
        return;
    }
    let this = std::cell::OnceCell::new();
    let was = std::cell::OnceCell::new();
    for r in rules(schema) {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else {
            continue;
        };
        // A rule that does not compile was refused with its CRD.
        let Ok(program) = compile(rule) else {
            continue;
        };
        let old_cel = if uses_old(&program) {
            match old {
                Some(o) => Some(was.get_or_init(|| to_cel(schema, o))),
                None => continue,
            }
        } else {
            None
        };
        let this = this.get_or_init(|| to_cel(schema, v));
        let shown = format!("\"{}\"", type_name(v));
        let message = match run(&program, this, old_cel) {
            Ok(Cel::Bool(true)) => continue,
            Ok(Cel::Bool(false)) => failure_message(r, rule, this, old_cel),
            Ok(other) => format!("rule did not evaluate to a bool: {}", kind(&other)),
            Err(e) => {
                out.push(Cause {
                    reason: "FieldValueInvalid",
                    field: or_nil(path),
                    message: format!("Invalid value: {shown}: {e} evaluating rule: {rule}"),
                });
                continue;
            }
        };
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
        let (reason, message) = match r.get("reason").and_then(Value::as_str) {
            Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {message}")),
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
            field: or_nil(&field),
            message,
        });
    }
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            for (k, child) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let declared = props.and_then(|p| p.get(k));
                let Some(s) = declared.or(extra) else {
                    continue;
                };
                let child_old = old.and_then(|o| o.get(k));
                // A property is a child (`a.b`), a map's entry a key (`a[b]`): apiextensions'
                // `fldPath.Child(k)` and `fldPath.Key(k)`.
                let child_path = match (declared.is_some(), path.is_empty()) {
                    (true, true) => k.clone(),
                    (true, false) => format!("{path}.{k}"),
                    (false, _) => format!("{path}[{k}]"),
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

fn or_nil(field: &str) -> String {
    if field.is_empty() {
        "<nil>".into()
    } else {
        field.to_owned()
    }
}

/// The message of a failed rule: its `messageExpression`'s string when that evaluates to a
/// non-empty one (the real server falls back as this does), else `message`, else the rule.
fn failure_message(r: &Value, rule: &str, this: &Cel, old: Option<&Cel>) -> String {
    if let Some(m) = r.get("messageExpression").and_then(Value::as_str)
        && let Ok(p) = compile(m)
        && (!uses_old(&p) || old.is_some())
        && let Ok(Cel::String(s)) = run(&p, this, old)
        && !s.trim().is_empty()
        && !s.contains('\n')
    {
        return s.to_string();
    }
    r.get("message")
        .and_then(Value::as_str)
        .map_or_else(|| format!("failed rule: {rule}"), str::to_owned)
}

fn kind(v: &Cel) -> String {
    format!("{:?}", v.type_of())
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

/// CEL's reserved words, which apiextensions escapes as `__word__` in property names.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as a rule sees it (apiserver's `cel.Escape`): `None` when it cannot be.
pub fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut first = true;
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            first = false;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphabetic() || c == '_' || (!first && c.is_ascii_digit()) => {
                out.push(c);
            }
            _ => return None,
        }
        first = false;
        rest = &rest[c.len_utf8()..];
    }
    (!out.is_empty()).then_some(out)
}

/// A JSON value as CEL sees it under `schema`: integers as `int`, an object with `properties`
/// keyed by escaped names, a map (`additionalProperties`) by its own keys.
fn to_cel(schema: &Value, v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => n
                .as_u64()
                .map_or_else(|| Cel::Float(n.as_f64().unwrap_or_default()), Cel::UInt),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item = schema.get("items").unwrap_or(&Value::Null);
            Cel::List(Arc::new(items.iter().map(|i| to_cel(item, i)).collect()))
        }
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            let mut out: HashMap<Key, Cel> = HashMap::new();
            for (k, child) in m {
                let (key, s) = match (props.and_then(|p| p.get(k)), extra) {
                    (Some(s), _) => match escape(k) {
                        Some(e) => (e, s),
                        None => continue,
                    },
                    (None, Some(s)) => (k.clone(), s),
                    // Unknown or preserved fields: seen under their escaped names, untyped.
                    (None, None) => match escape(k) {
                        Some(e) => (e, &Value::Null),
                        None => continue,
                    },
                };
                out.insert(Key::String(Arc::new(key)), to_cel(s, child));
            }
            Cel::from(out)
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

    /// A map's entry is reported at `map[key]` (apiextensions' `fldPath.Key`), a property at
    /// `object.property` (this once reported the entry at `labels.x`).
    #[test]
    fn a_maps_entry_is_reported_at_its_key() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "labels": {"type": "object", "maxProperties": 8, "additionalProperties": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self.size() <= 3", "message": "too long"}]}}}}}});
        assert_eq!(
            fields(&check(
                &s,
                &json!({"spec": {"labels": {"a/b": "long", "c": "ok"}}}),
                None
            )),
            [(
                "spec.labels[a/b]".into(),
                "Invalid value: \"string\": too long".into()
            )]
        );
    }

    #[test]
    fn rules_that_do_not_compile_are_refused_with_their_crd() {
        let s = json!({"properties": {"spec": {"x-kubernetes-validations": [
            {"rule": "self.all(x, x > 0)"}, {"rule": "self.a =="}, {"rule": "foo(self)"},
            {"rule": "other.a == 1"}, {"rule": "true", "messageExpression": "'a' +"}]}}});
        let mut out = Vec::new();
        compile_errors(&s, "spec.versions[0].schema.openAPIV3Schema", &mut out);
        let at =
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
        assert_eq!(
            out.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            [
                format!("{at}[1].rule"),
                format!("{at}[2].rule"),
                format!("{at}[3].rule"),
                format!("{at}[4].messageExpression"),
            ]
        );
        assert!(
            out[1].message.contains("undeclared reference to 'foo'"),
            "{out:?}"
        );
        assert!(
            out[2].message.contains("undeclared reference to 'other'"),
            "{out:?}"
        );
    }

    #[test]
    fn a_rules_reason_field_path_and_message_are_checked_with_its_crd() {
        let s = json!({"properties": {"spec": {"properties": {"a": {"type": "object",
                "properties": {"b": {"type": "string"}}}},
            "x-kubernetes-validations": [
                {"rule": "true", "fieldPath": ".a.b"},
                {"rule": "true", "fieldPath": ".a['b']"},
                {"rule": "true", "fieldPath": ".a.c"},
                {"rule": "true", "reason": "FieldValueWrong"},
                {"rule": "true", "message": "two\nlines"},
                {"rule": "true", "messageExpression": " "}]}}});
        let mut out = Vec::new();
        compile_errors(&s, "x", &mut out);
        let at = "x.properties[spec].x-kubernetes-validations";
        assert_eq!(
            fields(&out),
            [
                (
                    format!("{at}[2].fieldPath"),
                    "Invalid value: \".a.c\": fieldPath must be a valid path".into()
                ),
                (
                    format!("{at}[3].reason"),
                    "Unsupported value: \"FieldValueWrong\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"".into()
                ),
                (
                    format!("{at}[4].message"),
                    "Invalid value: \"two\\nlines\": message must not contain line breaks".into()
                ),
                (
                    format!("{at}[5].messageExpression"),
                    "Required value: messageExpression must be non-empty if specified".into()
                ),
            ]
        );
    }

    #[test]
    fn a_rule_that_iterates_an_unbounded_list_is_refused_with_its_crd() {
        let s = json!({"properties": {"spec": {"type": "object", "properties": {
                "free": {"type": "array", "items": {"type": "object", "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}}}}},
                "bounded": {"type": "array", "maxItems": 10, "items": {"type": "object",
                    "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}}},
            "x-kubernetes-validations": [
                {"rule": "self.bounded.all(b, b.tags.size() < 3)"},
                {"rule": "self.free.all(f, true)"},
                {"rule": "self.bounded.all(b, b.tags.all(t, t != ''))"},
                {"rule": "size(self.free) < 3"}]}}});
        let mut out = Vec::new();
        compile_errors(&s, "x", &mut out);
        let at = "x.properties[spec].x-kubernetes-validations";
        assert_eq!(
            fields(&out),
            [
                (format!("{at}[1].rule"), format!("Forbidden: {COST}")),
                (format!("{at}[2].rule"), format!("Forbidden: {COST}")),
            ]
        );
    }

    #[test]
    fn a_rule_reading_an_undeclared_or_untyped_field_does_not_compile() {
        let s = json!({"properties": {"spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "any": {"x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true},
                "list": {"type": "array", "maxItems": 5, "items": {"type": "object",
                    "properties": {"n": {"type": "string"}}}}},
            "x-kubernetes-validations": [
                {"rule": "has(self.a) && has(self.port) && self.list.all(l, l.n != '')"},
                {"rule": "self.b == 'x'"},
                {"rule": "!has(self.any)"},
                {"rule": "self.list.all(l, l.m != '')"},
                {"rule": "true", "messageExpression": "self.any"}]}}});
        let mut out = Vec::new();
        compile_errors(&s, "x", &mut out);
        let got: Vec<(String, bool)> = out
            .iter()
            .map(|c| (c.field.clone(), c.message.contains("undefined field")))
            .collect();
        let at = "x.properties[spec].x-kubernetes-validations";
        assert_eq!(
            got,
            [
                (format!("{at}[1].rule"), true),
                (format!("{at}[2].rule"), true),
                (format!("{at}[3].rule"), true),
                (format!("{at}[4].messageExpression"), true),
            ]
        );
    }

    #[test]
    fn macros_message_expressions_and_escaped_names_evaluate() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{
                "rule": "self.items.all(p, self.items.exists_one(q, q.name == p.name))",
                "messageExpression": "'name `' + self.items.filter(p, self.items.filter(q, q.name == p.name).size() > 1)[0].name + '` is used twice'",
                "message": "names are unique"},
                {"rule": "!has(self.__namespace__) || self.__namespace__.startsWith('ns-')",
                 "message": "namespace"},
                {"rule": "self.items.size() < 3", "messageExpression": "1 + 1",
                 "message": "fallback"}],
            "properties": {"namespace": {"type": "string"}, "items": {"type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}}});
        let ok = json!({"spec": {"namespace": "ns-a", "items": [{"name": "a"}, {"name": "b"}]}});
        assert!(check(&s, &ok, None).is_empty());
        let bad = json!({"spec": {"namespace": "a",
            "items": [{"name": "a"}, {"name": "b"}, {"name": "b"}]}});
        assert_eq!(
            fields(&check(&s, &bad, None)),
            [
                (
                    "spec".into(),
                    "Invalid value: \"object\": name `b` is used twice".into()
                ),
                ("spec".into(), "Invalid value: \"object\": namespace".into()),
                ("spec".into(), "Invalid value: \"object\": fallback".into()),
            ]
        );
    }

    #[test]
    fn names_escape_as_apiextensions_escapes_them() {
        // The rules of k8s.io/apiserver/pkg/cel's `Escape`.
        for (name, want) in [
            ("namespace", Some("__namespace__")),
            ("if", Some("__if__")),
            ("foo", Some("foo")),
            ("a-b", Some("a__dash__b")),
            ("a.b", Some("a__dot__b")),
            ("a/b", Some("a__slash__b")),
            ("a__b", Some("a__underscores__b")),
            ("_a", Some("_a")),
            ("1a", None),
            ("a b", None),
        ] {
            assert_eq!(escape(name).as_deref(), want, "{name}");
        }
    }
}
