//! `/etc/kos/bootstrap.env`, read as strictly as kos writes it: comments, blank lines and
//! `KEY='value'` lines (single-quoted, `'\''` for a quote). Anything else is an error naming the line,
//! because bash would either fail on it or run it as a command.

use std::collections::BTreeMap;
use std::fmt;

/// The sourced parameters.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl fmt::Debug for Env {
    // Values may be secret one day: keys only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Env {
    /// Parses the file; the error names the line.
    pub fn parse(text: &str) -> Result<Env, String> {
        let mut vars = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let bad = || format!("bootstrap.env line {n} is not KEY='value'");
            let (key, rest) = l.split_once('=').ok_or_else(bad)?;
            let key_ok = key
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
                && key
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if !key_ok {
                return Err(bad());
            }
            vars.insert(key.to_owned(), unquote(rest).ok_or_else(bad)?);
        }
        Ok(Env { vars })
    }

    /// A variable, or what `set -u` says when it is unset.
    pub fn get(&self, key: &str) -> Result<&str, String> {
        self.vars
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("{key}: unbound variable"))
    }

    /// A variable that must be a number.
    pub fn number(&self, key: &str) -> Result<u64, String> {
        let v = self.get(key)?;
        v.parse()
            .map_err(|_| format!("{key}={v:?}: integer expression expected"))
    }
}

/// `'a'\''b'` → `a'b`; `None` unless the whole value is single-quoted segments.
fn unquote(v: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = v;
    loop {
        let body = rest.strip_prefix('\'')?;
        let end = body.find('\'')?;
        out.push_str(&body[..end]);
        rest = &body[end + 1..];
        if rest.is_empty() {
            return Some(out);
        }
        rest = rest.strip_prefix("\\'")?;
        out.push('\'');
        if rest.is_empty() {
            return Some(out);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_single_quoted_assignments_parse() {
        let e = Env::parse("# c\n\nA='x'\nB='it'\\''s'\n").unwrap();
        assert_eq!(e.get("A").unwrap(), "x");
        assert_eq!(e.get("B").unwrap(), "it's");
        assert_eq!(e.get("C").unwrap_err(), "C: unbound variable");
        for bad in [
            "A=x\n",
            "a='x'\n",
            "A='x\n",
            "A='x' B='y'\n",
            "echo hi\n",
            "A=\"x\"\n",
        ] {
            assert!(Env::parse(bad).is_err(), "{bad}");
        }
    }
}
