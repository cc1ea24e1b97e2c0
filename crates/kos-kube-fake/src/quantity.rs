//! `resource.Quantity` (apimachinery `pkg/api/resource`): parsing what a storage request or a
//! capacity says, to compare sizes as kube-apiserver's validation does (`1Gi` == `1073741824`).
//!
//! Simplified: values are kept in nano-units in an `i128` (exact for every quantity whose
//! fractional part stops at nano, up to about 10^29), where the real type is arbitrary precision
//! and rounds finer fractions up. [`canonical`] is the form the real server stores and answers
//! (`1024Mi` is `1Gi`, `1.5Gi` is `1536Mi`, `1000M` is `1G`, `0.5` is `500m`).

/// A parsed quantity, in nano-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

/// What apimachinery's `ParseQuantity` answers for a string it refuses.
pub const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// `None` when `s` is not a quantity (or is beyond what the fake represents).
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
            return None;
        }
        let digits = format!("{int}{frac}");
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        // value = mantissa * 10^-frac.len() * suffix, kept * 10^9.
        let mut scaled = mantissa.checked_mul(NANO)?;
        let frac_len = u32::try_from(frac.len()).ok()?;
        scaled /= 10i128.checked_pow(frac_len)?;
        let scaled = match suffix {
            "" => scaled,
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power = match suffix {
                    "Ki" => 1,
                    "Mi" => 2,
                    "Gi" => 3,
                    "Ti" => 4,
                    "Pi" => 5,
                    _ => 6,
                };
                scaled.checked_mul(1024i128.checked_pow(power)?)?
            }
            "n" => scaled / NANO,
            "u" => scaled / 1_000_000,
            "m" => scaled / 1_000,
            "k" => scaled.checked_mul(1_000)?,
            "M" => scaled.checked_mul(1_000_000)?,
            "G" => scaled.checked_mul(NANO)?,
            "T" => scaled.checked_mul(1_000_000_000_000)?,
            "P" => scaled.checked_mul(1_000_000_000_000_000)?,
            "E" => scaled.checked_mul(1_000_000_000_000_000_000)?,
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().ok()?;
                let factor = 10i128.checked_pow(e.unsigned_abs())?;
                if e >= 0 {
                    scaled.checked_mul(factor)?
                } else {
                    scaled / factor
                }
            }
            _ => return None,
        };
        Some(Quantity(if negative { -scaled } else { scaled }))
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The value in whole units, rounded up (apimachinery's `Value()`); `None` beyond `i64`.
    pub fn value(self) -> Option<i64> {
        let whole = self.0.div_euclid(NANO) + i128::from(self.0.rem_euclid(NANO) != 0);
        i64::try_from(whole).ok()
    }

    /// Zero, what an absent quantity compares as (Go's zero `Quantity`).
    pub const ZERO: Quantity = Quantity(0);
}

/// How a quantity was written, which its canonical form keeps (apimachinery's `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

fn format_of(text: &str) -> Format {
    let suffix = text
        .trim_start_matches(['+', '-'])
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    if suffix.ends_with('i') {
        Format::BinarySi
    } else if suffix.starts_with(['e', 'E']) && suffix.len() > 1 {
        Format::DecimalExponent
    } else {
        Format::DecimalSi
    }
}

/// apimachinery's `Quantity.String()` of `text` (`CanonicalizeBytes`), or `None` when `text` is
/// not a quantity or its canonical form is beyond what the fake represents.
pub fn canonical(text: &str) -> Option<String> {
    let Quantity(value) = Quantity::parse(text)?;
    if value == 0 {
        return Some("0".to_owned());
    }
    let mut format = format_of(text.trim());
    if format == Format::BinarySi && (value.abs() < 1024 * NANO || value % NANO != 0) {
        // Small or fractional binary quantities are shown in decimal, not rounded.
        format = Format::DecimalSi;
    }
    if format == Format::BinarySi {
        let mut n = value / NANO;
        let mut exp = 0;
        while exp < 6 && n % 1024 == 0 {
            n /= 1024;
            exp += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
        return Some(format!("{n}{suffix}"));
    }
    // Decimal: the mantissa as small as an exponent that is a multiple of 3 allows.
    let (mut m, mut e) = (value, -9i32);
    while m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    let e3 = e.div_euclid(3) * 3;
    m = m.checked_mul(10i128.checked_pow((e - e3).unsigned_abs())?)?;
    let suffix = match format {
        Format::DecimalExponent if e3 == 0 => String::new(),
        Format::DecimalExponent => format!("e{e3}"),
        _ => match e3 {
            -9 => "n".into(),
            -6 => "u".into(),
            -3 => "m".into(),
            0 => String::new(),
            3 => "k".into(),
            6 => "M".into(),
            9 => "G".into(),
            12 => "T".into(),
            15 => "P".into(),
            18 => "E".into(),
            _ => return None,
        },
    };
    Some(format!("{m}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Option<Quantity> {
        Quantity::parse(s)
    }

    #[test]
    fn binary_decimal_and_exponent_forms_compare_by_value() {
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("1G"), q("1e9"));
        assert_eq!(q("500m"), q("0.5"));
        assert!(q("2Gi") > q("2G"));
        assert!(q("-1").is_some_and(Quantity::is_negative));
        assert_eq!(q("+3"), q("3"));
    }

    #[test]
    fn canonical_forms_are_apimachinerys() {
        for (sent, stored) in [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("1000Mi", "1000Mi"),
            ("0.5Ki", "512"),
            ("1073741824", "1073741824"),
            ("1000M", "1G"),
            ("1.5G", "1500M"),
            ("0.5", "500m"),
            ("1e9", "1e9"),
            ("12e6", "12e6"),
            ("0Gi", "0"),
            ("-2Gi", "-2Gi"),
            ("+1k", "1k"),
        ] {
            assert_eq!(canonical(sent).as_deref(), Some(stored), "{sent}");
        }
        assert_eq!(canonical("lots"), None);
    }

    #[test]
    fn what_is_not_a_quantity_is_refused() {
        for bad in ["", "Gi", "1GB", "1.2.3", "one", "1 Gi", "."] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }
}
