//! How gcfg turns a value into a typed field, as the upstream's Go structs see it: booleans
//! (`types.ParseBool`), integers (`types.ParseInt`, decimal or `0x` hex), Go durations
//! (`time.ParseDuration` behind the upstream's `MyDuration`), last-wins single values, appending
//! multi values, and the diagnostics that name file, line, section and key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use secrecy::SecretString;

use super::gcfg::Entry;

/// An error or a warning about one place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: u32,
    /// `[Section]` or `[Section "sub"]`.
    pub section: String,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.section)?;
        if let Some(k) = &self.key {
            write!(f, " {k}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Collected errors and warnings of one load.
#[derive(Debug, Default)]
pub(crate) struct Diags {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

/// gcfg's booleans, any case: true/yes/on/1 and false/no/off/0.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// gcfg's integers: optional sign, then decimal digits or `0x` and hex digits.
pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            i64::from_str_radix(hex, 16).ok()?
        }
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse::<i64>().ok()?
        }
        None => return None,
    };
    Some(if neg { -magnitude } else { magnitude })
}

/// Why a Go duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("is not a Go duration: it has no unit (write e.g. \"{0}s\")")]
    MissingUnit(String),
    #[error("is not a Go duration (e.g. \"30s\", \"1m30s\", \"500ms\"; units ns, us, ms, s, m, h)")]
    Invalid,
    #[error("is too large for a Go duration")]
    Overflow,
    #[error("is negative")]
    Negative,
}

/// Go's `time.ParseDuration`, limited to non-negative results: `[-+]?(\d*(\.\d*)?unit)+`, or a
/// bare `0`.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Invalid);
    }
    if rest.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(DurationError::MissingUnit(s.to_owned()));
    }
    let mut total: f64 = 0.0;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Invalid);
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(DurationError::MissingUnit(s.to_owned())),
            _ => return Err(DurationError::Invalid),
        };
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| DurationError::Overflow)?
        };
        let frac: f64 = if frac_part.is_empty() {
            0.0
        } else {
            format!("0.{frac_part}").parse().unwrap_or(0.0)
        };
        nanos = whole
            .checked_mul(scale)
            .and_then(|n| nanos.checked_add(n))
            .ok_or(DurationError::Overflow)?;
        total += frac * scale as f64;
        rest = after;
    }
    let nanos = nanos + total as u128;
    // Go's limit: int64 nanoseconds.
    if nanos > i64::MAX as u128 {
        return Err(DurationError::Overflow);
    }
    if neg && nanos > 0 {
        return Err(DurationError::Negative);
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Go's `Duration.String()` for display: `1m30s`, `500ms`, `0s`.
pub fn format_go_duration(d: Duration) -> String {
    let n = d.as_nanos();
    if n == 0 {
        return "0s".into();
    }
    if n < 1_000_000_000 {
        return match n {
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}us", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let sub = d.subsec_nanos();
    let mut out = String::new();
    if h > 0 {
        out += &format!("{h}h");
    }
    if h > 0 || m > 0 {
        out += &format!("{m}m");
    }
    if sub == 0 {
        out += &format!("{s}s");
    } else {
        let frac = format!("{sub:09}");
        out += &format!("{s}.{}s", frac.trim_end_matches('0'));
    }
    out
}

/// Reads the typed keys of one section (all headers of it merged, in file order) and warns about
/// the keys nobody asked for. Names match case-insensitively, as gcfg's `strings.EqualFold`.
pub(crate) struct SectionReader<'a> {
    pub file: &'a str,
    pub label: String,
    /// Line of the first header, for messages about a missing key.
    pub line: u32,
    entries: Vec<&'a Entry>,
    used: BTreeSet<String>,
    /// Key → line of the value in effect, for the effective-configuration listing.
    pub origins: BTreeMap<&'static str, u32>,
}

impl<'a> SectionReader<'a> {
    pub fn new(file: &'a str, label: String, line: u32, entries: Vec<&'a Entry>) -> Self {
        SectionReader {
            file,
            label,
            line,
            entries,
            used: BTreeSet::new(),
            origins: BTreeMap::new(),
        }
    }

    pub fn diag(&self, line: u32, key: Option<&str>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: self.file.to_owned(),
            line,
            section: self.label.clone(),
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }

    fn matching(&self, key: &str) -> Vec<&'a Entry> {
        self.entries
            .iter()
            .copied()
            .filter(|e| e.name.to_lowercase() == key)
            .collect()
    }

    /// The last value of a single-valued key (gcfg: each occurrence overwrites the previous one),
    /// with its line. A bare key is an error for anything but booleans.
    fn last(
        &mut self,
        key: &'static str,
        d: &mut Diags,
        bare_ok: bool,
    ) -> Option<(Option<String>, u32)> {
        self.used.insert(key.to_owned());
        let all = self.matching(key);
        let last = *all.last()?;
        if all.len() > 1 {
            let lines: Vec<String> = all.iter().map(|e| e.pos.line.to_string()).collect();
            d.warnings.push(self.diag(
                last.pos.line,
                Some(key),
                format!(
                    "set {} times (lines {}); the last one wins, as in the upstream CCM",
                    all.len(),
                    lines.join(", ")
                ),
            ));
        }
        if last.value.is_none() && !bare_ok {
            d.errors.push(self.diag(
                last.pos.line,
                Some(key),
                "needs a value (`key = value`): only boolean keys may be written bare",
            ));
            return None;
        }
        self.origins.insert(key, last.pos.line);
        Some((last.value.clone(), last.pos.line))
    }

    /// A string; empty counts as unset, as the upstream compares with "".
    pub fn string(&mut self, key: &'static str, d: &mut Diags) -> Option<String> {
        let (v, _) = self.last(key, d, false)?;
        v.filter(|v| !v.is_empty())
    }

    /// A string and its line.
    pub fn string_at(&mut self, key: &'static str, d: &mut Diags) -> Option<(String, u32)> {
        let (v, line) = self.last(key, d, false)?;
        v.filter(|v| !v.is_empty()).map(|v| (v, line))
    }

    pub fn secret(&mut self, key: &'static str, d: &mut Diags) -> Option<SecretString> {
        self.string(key, d).map(SecretString::from)
    }

    pub fn bool(&mut self, key: &'static str, d: &mut Diags) -> Option<bool> {
        let (v, line) = self.last(key, d, true)?;
        let Some(v) = v else { return Some(true) };
        match parse_bool(&v) {
            Some(b) => Some(b),
            None => {
                d.errors.push(self.diag(
                    line,
                    Some(key),
                    format!("value {v:?} is not a boolean (true/false, yes/no, on/off, 1/0)"),
                ));
                None
            }
        }
    }

    /// An integer in `min..=max`.
    pub fn int(&mut self, key: &'static str, min: i64, max: i64, d: &mut Diags) -> Option<i64> {
        let (v, line) = self.last(key, d, false)?;
        let v = v.unwrap_or_default();
        let range = if max == i64::MAX {
            format!("at least {min}")
        } else {
            format!("between {min} and {max}")
        };
        match parse_int(&v) {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(n) => {
                d.errors.push(self.diag(
                    line,
                    Some(key),
                    format!("{n} is out of range: it must be {range}"),
                ));
                None
            }
            None => {
                d.errors.push(self.diag(
                    line,
                    Some(key),
                    format!("value {v:?} is not an integer (it must be {range})"),
                ));
                None
            }
        }
    }

    /// A Go duration of at least `min`.
    pub fn duration(
        &mut self,
        key: &'static str,
        min: Duration,
        d: &mut Diags,
    ) -> Option<Duration> {
        let (v, line) = self.last(key, d, false)?;
        let v = v.unwrap_or_default();
        match parse_go_duration(&v) {
            Ok(dur) if dur >= min => Some(dur),
            Ok(dur) => {
                d.errors.push(self.diag(
                    line,
                    Some(key),
                    format!(
                        "{} is too short: it must be at least {}",
                        format_go_duration(dur),
                        format_go_duration(min)
                    ),
                ));
                None
            }
            Err(e) => {
                d.errors
                    .push(self.diag(line, Some(key), format!("value {v:?} {e}")));
                None
            }
        }
    }

    /// One of `allowed`, exactly (the APIs behind these values are case-sensitive).
    pub fn one_of(&mut self, key: &'static str, allowed: &[&str], d: &mut Diags) -> Option<String> {
        let (v, line) = self.string_at(key, d)?;
        if allowed.contains(&v.as_str()) {
            return Some(v);
        }
        d.errors.push(self.diag(
            line,
            Some(key),
            format!("value {v:?} is not one of {}", allowed.join(", ")),
        ));
        None
    }

    /// A multi-valued key: each `key = v` appends, a bare `key` clears the list (gcfg `set`).
    pub fn multi(&mut self, key: &'static str, d: &mut Diags) -> Vec<String> {
        self.used.insert(key.to_owned());
        let mut out = Vec::new();
        for e in self.matching(key) {
            match &e.value {
                None => out.clear(),
                Some(v) => {
                    if v.is_empty() {
                        d.warnings.push(self.diag(
                            e.pos.line,
                            Some(key),
                            "an empty value adds an empty name to the list (as in the upstream CCM); \
                             write a bare `key` to clear the list",
                        ));
                    }
                    out.push(v.clone());
                }
            }
            self.origins.insert(key, e.pos.line);
        }
        out
    }

    /// A key the upstream no longer reads: warn and ignore it.
    pub fn obsolete(&mut self, key: &'static str, why: &str, d: &mut Diags) {
        self.used.insert(key.to_owned());
        if let Some(e) = self.matching(key).last() {
            d.warnings
                .push(self.diag(e.pos.line, Some(key), format!("ignored: {why}")));
        }
    }

    /// Warns about every key no reader asked for: the upstream ignores them silently (gcfg
    /// `FatalOnly`), which hides typos. The key itself is not shown: a line the CCM cannot use may
    /// be a secret that slipped onto a line of its own; the nearest known key is.
    pub fn finish(self, d: &mut Diags) -> BTreeMap<&'static str, u32> {
        let mut seen = BTreeSet::new();
        for e in &self.entries {
            let lower = e.name.to_lowercase();
            if !self.used.contains(&lower) && seen.insert(lower.clone()) {
                let near = crate::suggest::closest(&lower, self.used.iter().map(String::as_str), 3)
                    .map(|k| format!("; did you mean `{k}`?"))
                    .unwrap_or_default();
                d.warnings.push(self.diag(
                    e.pos.line,
                    None,
                    format!(
                        "a key the CCM does not know, ignored (the upstream CCM ignores it too; the \
                         line is not shown, it may hold a secret){near}"
                    ),
                ));
            }
        }
        self.origins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = |s: &str| parse_go_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+2us"), Duration::from_micros(2));
        assert_eq!(
            parse_go_duration("5"),
            Err(DurationError::MissingUnit("5".into()))
        );
        assert_eq!(parse_go_duration(""), Err(DurationError::Invalid));
        assert_eq!(parse_go_duration("5 s"), Err(DurationError::Invalid));
        assert_eq!(parse_go_duration("5d"), Err(DurationError::Invalid));
        assert_eq!(parse_go_duration("-1s"), Err(DurationError::Negative));
        assert_eq!(parse_go_duration("3000000h"), Err(DurationError::Overflow));
        assert_eq!(format_go_duration(ok("1m30s")), "1m30s");
        assert_eq!(format_go_duration(ok("1h")), "1h0m0s");
        assert_eq!(format_go_duration(ok("1.5s")), "1.5s");
        assert_eq!(format_go_duration(ok("500ms")), "500ms");
    }

    #[test]
    fn ints_and_bools() {
        assert_eq!(parse_int("0x1F"), Some(31));
        assert_eq!(parse_int("-3"), Some(-3));
        assert_eq!(parse_int("+7"), Some(7));
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_bool("YES"), Some(true));
        assert_eq!(parse_bool("Off"), Some(false));
        assert_eq!(parse_bool(""), None);
    }
}
