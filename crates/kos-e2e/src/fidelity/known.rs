//! The accepted differences, read from docs/fidelity.md: every table row whose first cell is a
//! backticked key, with its reason in the last cell. A `*` in a key matches any run of characters
//! (`*/keys/-dns_name`: that key on every step), so one row covers one cause. A difference not
//! listed fails the check; a listed key that matches nothing is reported as fixed (so the list
//! shrinks as kos-sim improves).

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Result, bail};

use super::compare::Difference;

/// Key → reason.
#[derive(Debug, Clone, Default)]
pub struct Known(pub BTreeMap<String, String>);

impl Known {
    pub fn parse(markdown: &str) -> Result<Known> {
        let mut m = BTreeMap::new();
        for (n, line) in markdown.lines().enumerate() {
            let cells: Vec<&str> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let Some(key) = cells
                .first()
                .and_then(|c| c.strip_prefix('`'))
                .and_then(|c| c.strip_suffix('`'))
            else {
                continue;
            };
            let reason = cells.last().copied().unwrap_or_default();
            if cells.len() < 2 || reason.is_empty() {
                bail!("docs/fidelity.md line {}: `{key}` has no reason", n + 1);
            }
            if m.insert(key.to_owned(), reason.to_owned()).is_some() {
                bail!("docs/fidelity.md line {}: `{key}` listed twice", n + 1);
            }
        }
        Ok(Known(m))
    }

    pub fn load(path: &std::path::Path) -> Result<Known> {
        Known::parse(&std::fs::read_to_string(path)?)
    }

    /// Sorts `diffs` into unexpected and known, and finds the listed keys that did not show up.
    pub fn judge(&self, diffs: Vec<Difference>) -> Report {
        let mut r = Report::default();
        let mut used = std::collections::BTreeSet::new();
        for d in diffs {
            match self.0.iter().find(|(k, _)| glob(k, &d.key)) {
                Some((k, reason)) => {
                    used.insert(k.clone());
                    r.known.push((d, reason.clone()));
                }
                None => r.unexpected.push(d),
            }
        }
        r.fixed = self
            .0
            .keys()
            .filter(|k| !used.contains(*k))
            .cloned()
            .collect();
        r
    }
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, s: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = s.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Not in docs/fidelity.md: a kos-sim bug to fix, or a new entry to write.
    pub unexpected: Vec<Difference>,
    pub known: Vec<(Difference, String)>,
    /// Listed, but kos-sim and the real cloud now agree: remove the entry.
    pub fixed: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.unexpected.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fidelity: {} unexpected, {} known, {} listed but no longer seen",
            self.unexpected.len(),
            self.known.len(),
            self.fixed.len()
        )?;
        for d in &self.unexpected {
            writeln!(f, "  UNEXPECTED {d}")?;
        }
        for (d, why) in &self.known {
            writeln!(f, "  known      {d}  ({why})")?;
        }
        for k in &self.fixed {
            writeln!(
                f,
                "  FIXED?     `{k}` is listed in docs/fidelity.md but did not show up"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_judges() -> Result<()> {
        let k = Known::parse(
            "# x\n| key | reason |\n|---|---|\n| `a/status` | because |\n| `b/keys/+x:y` | fake driver |\n",
        )?;
        assert_eq!(k.0.len(), 2);
        let d = |key: &str| Difference {
            key: key.into(),
            sim: "1".into(),
            real: "2".into(),
        };
        let r = k.judge(vec![d("a/status"), d("c/count")]);
        assert_eq!(r.unexpected, vec![d("c/count")]);
        assert_eq!(r.known.len(), 1);
        assert_eq!(r.fixed, vec!["b/keys/+x:y".to_owned()]);
        assert!(!r.passed());
        assert!(Known::parse("| `a` | |").is_err());
        let g = Known::parse("| `*/keys/-dns_name` | dns extension |\n| `port.*/count` | x |")?;
        let r = g.judge(vec![
            d("port.get/keys/-dns_name"),
            d("net.create/keys/-dns_name"),
            d("port.get/status"),
        ]);
        assert_eq!(r.known.len(), 2);
        assert_eq!(r.unexpected, vec![d("port.get/status")]);
        assert_eq!(r.fixed, vec!["port.*/count".to_owned()]);
        assert!(glob("a*b*c", "aXbYc") && !glob("a*b", "ab/c") && glob("*", "") && glob("x", "x"));
        Ok(())
    }
}
