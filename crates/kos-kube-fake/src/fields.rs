//! Field ownership, the part of server-side apply clients can observe: which manager set which
//! field, so an apply that would change another manager's field is refused with a 409 (that is what
//! makes Lease-based leader election through apply mutually exclusive), and a field a manager
//! stops applying is removed.
//!
//! Simplifications, all on the lenient side of the real server:
//! - a field is a path of map keys; **lists are atomic** (owned and replaced whole), where the real
//!   server merges associative lists (finalizers, conditions, containers) item by item; what the
//!   server defaults inside them does not count as a change
//!   ([`Ownership::apply_defaulted`]), so re-applying a list with the same items does not
//!   conflict, while applying part of another manager's list does;
//! - managers are `(name, Apply|Update, subresource)`, as in `managedFields`, whose `fieldsV1`
//!   this module also renders (without the `.` entries for maps and list items).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

pub type FieldPath = Vec<String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Manager {
    pub name: String,
    pub operation: Operation,
    /// `""` or `status`.
    pub subresource: String,
}

/// A field another manager owns that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub field: FieldPath,
}

impl Conflict {
    /// `.spec.holderIdentity`, as the real server prints it.
    pub fn field_string(&self) -> String {
        self.field.iter().map(|s| format!(".{s}")).collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Entry {
    fields: BTreeSet<FieldPath>,
    time: String,
}

/// Who owns which fields of one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ownership(BTreeMap<Manager, Entry>);

/// Fields nobody owns: identity and server-maintained metadata.
fn ignored(path: &[String]) -> bool {
    match path {
        [one] => one == "apiVersion" || one == "kind",
        [m, f] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "selfLink"
        ),
        _ => false,
    }
}

/// Every owned leaf of `v`: scalars, lists, nulls and empty maps.
pub fn leaves(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    path.push(k.clone());
                    if !ignored(path) {
                        walk(x, path, out);
                    }
                    path.pop();
                }
            }
            _ if !path.is_empty() => {
                out.insert(path.clone());
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

pub fn value_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| cur.get(seg))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        match cur.get_mut(seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(last);
    }
}

/// One path is a prefix of the other: they name the same field or one contains the other.
fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Maps merge recursively; everything else (lists included) is replaced.
pub fn deep_merge(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(slot) if slot.is_object() && v.is_object() => deep_merge(slot, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

impl Ownership {
    /// A non-apply write by `who` changed `old` into `new`: `who` now owns what changed; removed
    /// fields are nobody's.
    pub fn record_update(&mut self, who: &Manager, old: Option<&Value>, new: &Value, now: &str) {
        let new_leaves = leaves(new);
        let old_leaves = old.map(leaves).unwrap_or_default();
        let changed: Vec<FieldPath> = new_leaves
            .iter()
            .filter(|p| old.and_then(|o| value_at(o, p)) != value_at(new, p))
            .cloned()
            .collect();
        let removed: Vec<&FieldPath> = old_leaves.difference(&new_leaves).collect();
        for p in removed.iter().copied().chain(&changed) {
            for e in self.0.values_mut() {
                e.fields.retain(|q| !overlaps(p, q));
            }
        }
        if !changed.is_empty() {
            let e = self.0.entry(who.clone()).or_default();
            e.fields.extend(changed);
            e.time = now.to_owned();
        }
        self.0.retain(|_, e| !e.fields.is_empty());
    }

    /// Server-side apply of `applied` by `who` onto `current`: the object to store and the
    /// ownership to store with it, or the conflicts.
    pub fn apply(
        &self,
        who: &Manager,
        current: Option<&Value>,
        applied: &Value,
        force: bool,
        now: &str,
    ) -> Result<(Value, Ownership), Vec<Conflict>> {
        self.apply_defaulted(who, current, applied, force, now, &|_| {})
    }

    /// As [`Ownership::apply`], with the server's defaulting (`default`) applied to the merged
    /// object before it is compared: an apply that leaves out what the server defaults (inside a
    /// container, say, which an atomic list replaces whole) does not change, so does not conflict
    /// over, the defaulted values.
    pub fn apply_defaulted(
        &self,
        who: &Manager,
        current: Option<&Value>,
        applied: &Value,
        force: bool,
        now: &str,
        default: &dyn Fn(&mut Value),
    ) -> Result<(Value, Ownership), Vec<Conflict>> {
        let new_fields = leaves(applied);
        let mut candidate = current.cloned().unwrap_or_else(|| json!({}));
        let others = || self.0.iter().filter(|(m, _)| *m != who);
        if let Some(prev) = self.0.get(who) {
            for p in &prev.fields {
                let still_applied = new_fields.iter().any(|n| overlaps(n, p));
                let co_owned = others().any(|(_, e)| e.fields.iter().any(|q| overlaps(p, q)));
                if !still_applied && !co_owned {
                    remove_path(&mut candidate, p);
                }
            }
        }
        deep_merge(&mut candidate, applied);
        default(&mut candidate);
        let base = current.cloned().unwrap_or(Value::Null);
        let mut conflicts = Vec::new();
        for (m, e) in others() {
            for q in &e.fields {
                if new_fields.iter().any(|p| overlaps(p, q))
                    && value_at(&base, q) != value_at(&candidate, q)
                {
                    conflicts.push(Conflict {
                        manager: m.name.clone(),
                        field: q.clone(),
                    });
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(conflicts);
        }
        let mut next = self.clone();
        for c in &conflicts {
            for (m, e) in &mut next.0 {
                if m != who {
                    e.fields.retain(|q| *q != c.field);
                }
            }
        }
        next.0.insert(
            who.clone(),
            Entry {
                fields: new_fields,
                time: now.to_owned(),
            },
        );
        next.0.retain(|_, e| !e.fields.is_empty());
        Ok((candidate, next))
    }

    /// The ownership `metadata.managedFields` renders (what [`Ownership::render`] wrote): every
    /// empty map in `fieldsV1` ends a field path. Entries it cannot read are skipped.
    pub fn from_managed_fields(v: &Value) -> Ownership {
        fn walk(tree: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
            for (k, child) in tree {
                let Some(seg) = k.strip_prefix("f:") else {
                    continue;
                };
                path.push(seg.to_owned());
                match child.as_object() {
                    Some(m) if !m.is_empty() => walk(m, path, out),
                    _ => {
                        out.insert(path.clone());
                    }
                }
                path.pop();
            }
        }
        let mut owners = BTreeMap::new();
        for e in v.as_array().into_iter().flatten() {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
            let operation = match s("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => continue,
            };
            let mut fields = BTreeSet::new();
            if let Some(tree) = e.get("fieldsV1").and_then(Value::as_object) {
                walk(tree, &mut Vec::new(), &mut fields);
            }
            owners.insert(
                Manager {
                    name: s("manager").to_owned(),
                    operation,
                    subresource: s("subresource").to_owned(),
                },
                Entry {
                    fields,
                    time: s("time").to_owned(),
                },
            );
        }
        Ownership(owners)
    }

    /// `metadata.managedFields`.
    pub fn render(&self, api_version: &str) -> Value {
        let entries: Vec<Value> = self
            .0
            .iter()
            .map(|(m, e)| {
                let mut tree = Map::new();
                for p in &e.fields {
                    let mut cur = &mut tree;
                    for seg in p {
                        let slot = cur
                            .entry(format!("f:{seg}"))
                            .or_insert_with(|| Value::Object(Map::new()));
                        let Value::Object(next) = slot else {
                            break;
                        };
                        cur = next;
                    }
                }
                let mut v = json!({
                    "manager": m.name,
                    "operation": match m.operation { Operation::Apply => "Apply", Operation::Update => "Update" },
                    "apiVersion": api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": tree,
                });
                if !m.subresource.is_empty() {
                    v["subresource"] = json!(m.subresource);
                }
                v
            })
            .collect();
        Value::Array(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mgr(name: &str, op: Operation) -> Manager {
        Manager {
            name: name.into(),
            operation: op,
            subresource: String::new(),
        }
    }

    #[test]
    fn apply_conflicts_with_another_managers_different_value_only() {
        let a = mgr("a", Operation::Apply);
        let b = mgr("b", Operation::Apply);
        let own = Ownership::default();
        let lease = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        let Ok((obj, own)) = own.apply(&a, None, &lease, false, "t") else {
            panic!("first apply conflicts")
        };
        // Same value: shared ownership, no conflict.
        assert!(
            own.apply(
                &b,
                Some(&obj),
                &json!({"spec": {"leaseDurationSeconds": 15}}),
                false,
                "t"
            )
            .is_ok()
        );
        let Err(c) = own.apply(
            &b,
            Some(&obj),
            &json!({"spec": {"holderIdentity": "b"}}),
            false,
            "t",
        ) else {
            panic!("no conflict")
        };
        assert_eq!(c[0].manager, "a");
        assert_eq!(c[0].field_string(), ".spec.holderIdentity");
        let Ok((forced, own2)) = own.apply(
            &b,
            Some(&obj),
            &json!({"spec": {"holderIdentity": "b"}}),
            true,
            "t",
        ) else {
            panic!("force failed")
        };
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        // a no longer owns holderIdentity, so b's value stays when a applies without it.
        let Ok((after, _)) = own2.apply(
            &a,
            Some(&forced),
            &json!({"spec": {"leaseDurationSeconds": 15}}),
            false,
            "t",
        ) else {
            panic!("conflict")
        };
        assert_eq!(after["spec"]["holderIdentity"], "b");
    }

    #[test]
    fn managed_fields_read_back_into_the_same_ownership() {
        let mut o = Ownership::default();
        let obj = json!({"spec": {"a": 1, "b": {"c": [1, 2]}}, "metadata": {"labels": {"x": "y"}}});
        o.record_update(&mgr("kubectl", Operation::Update), None, &obj, "t0");
        let (_, o) = o
            .apply(
                &mgr("ccm", Operation::Apply),
                Some(&obj),
                &json!({"status": {"s": true}}),
                false,
                "t1",
            )
            .expect("no conflict");
        let back = Ownership::from_managed_fields(&o.render("v1"));
        assert_eq!(back, o);
        assert_eq!(back.render("v1"), o.render("v1"));
    }

    #[test]
    fn fields_a_manager_stops_applying_are_removed_and_updates_take_ownership() {
        let a = mgr("a", Operation::Apply);
        let u = mgr("u", Operation::Update);
        let Ok((obj, own)) = Ownership::default().apply(
            &a,
            None,
            &json!({"metadata": {"labels": {"x": "1", "y": "2"}}}),
            false,
            "t",
        ) else {
            panic!("conflict")
        };
        let Ok((obj2, _)) = own.apply(
            &a,
            Some(&obj),
            &json!({"metadata": {"labels": {"x": "1"}}}),
            false,
            "t",
        ) else {
            panic!("conflict")
        };
        assert_eq!(obj2["metadata"]["labels"], json!({"x": "1"}));

        let mut own = own;
        let mut changed = obj.clone();
        changed["metadata"]["labels"]["y"] = json!("3");
        own.record_update(&u, Some(&obj), &changed, "t");
        // y changed hands: an apply without y leaves it to u.
        let Ok((obj3, _)) = own.apply(
            &a,
            Some(&changed),
            &json!({"metadata": {"labels": {"x": "1"}}}),
            false,
            "t",
        ) else {
            panic!("conflict")
        };
        assert_eq!(obj3["metadata"]["labels"]["y"], "3");
        let mf = own.render("v1");
        assert_eq!(mf[1]["manager"], "u");
        assert_eq!(
            mf[1]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:y": {}}}})
        );
    }
}
