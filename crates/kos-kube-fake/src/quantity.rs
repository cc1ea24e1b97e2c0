//! `resource.Quantity` (apimachinery `pkg/api/resource`): parsing what a storage request or a
//! capacity says, to compare sizes as kube-apiserver's validation does (`1Gi` == `1073741824`).
//!
//! Simplified: values are kept in nano-units in an `i128` (exact for every quantity whose
//! fractional part stops at nano, up to about 10^29), where the real type is arbitrary precision;
//! stored objects keep the text the client sent, where the real server writes the canonical form
//! (`1024Mi` becomes `1Gi`).

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

    /// Zero, what an absent quantity compares as (Go's zero `Quantity`).
    pub const ZERO: Quantity = Quantity(0);
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
    fn what_is_not_a_quantity_is_refused() {
        for bad in ["", "Gi", "1GB", "1.2.3", "one", "1 Gi", "."] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }
}
