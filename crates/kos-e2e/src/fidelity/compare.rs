//! Comparison of two recordings. Each difference gets a stable key, `<step>/<aspect>[/<detail>]`:
//! `port.create/status`, `port.create/error`, `port.create/keys/+binding:host_id` (a key only the
//! real cloud sends), `…/keys/-foo` (only kos-sim sends it), `…/states`, `…/count`,
//! `…/value/<field>`, `…/missing`. docs/fidelity.md lists the accepted ones by these keys.

use std::fmt;

use super::record::{Observation, Recording};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub key: String,
    pub sim: String,
    pub real: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: kos-sim {} | real {}", self.key, self.sim, self.real)
    }
}

/// Every difference between `sim` and `real`, in the real recording's step order.
pub fn diff(sim: &Recording, real: &Recording) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut steps: Vec<&str> = real.steps.iter().map(|(s, _)| s.as_str()).collect();
    for (s, _) in &sim.steps {
        if !steps.contains(&s.as_str()) {
            steps.push(s);
        }
    }
    for step in steps {
        match (sim.get(step), real.get(step)) {
            (Some(a), Some(b)) => step_diff(step, a, b, &mut out),
            (a, b) => out.push(Difference {
                key: format!("{step}/missing"),
                sim: present(a),
                real: present(b),
            }),
        }
    }
    out
}

fn present(o: Option<&Observation>) -> String {
    if o.is_some() {
        "recorded"
    } else {
        "not recorded"
    }
    .into()
}

fn opt<T: fmt::Debug>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |v| format!("{v:?}"))
}

fn step_diff(step: &str, a: &Observation, b: &Observation, out: &mut Vec<Difference>) {
    let mut add = |aspect: String, sim: String, real: String| {
        out.push(Difference {
            key: format!("{step}/{aspect}"),
            sim,
            real,
        })
    };
    if a.status != b.status {
        add("status".into(), opt(&a.status), opt(&b.status));
    }
    if a.error != b.error {
        add("error".into(), opt(&a.error), opt(&b.error));
    }
    if a.states != b.states {
        add(
            "states".into(),
            format!("{:?}", a.states),
            format!("{:?}", b.states),
        );
    }
    if a.count != b.count {
        add("count".into(), opt(&a.count), opt(&b.count));
    }
    // Shapes and values only mean something when both calls succeeded.
    if !(a.ok() && b.ok()) {
        return;
    }
    for k in b.keys.difference(&a.keys) {
        add(format!("keys/+{k}"), "absent".into(), "present".into());
    }
    for k in a.keys.difference(&b.keys) {
        add(format!("keys/-{k}"), "present".into(), "absent".into());
    }
    for (f, va) in &a.values {
        let vb = b.values.get(f).cloned().unwrap_or_else(|| "-".into());
        if *va != vb {
            add(format!("value/{f}"), va.clone(), vb);
        }
    }
}
