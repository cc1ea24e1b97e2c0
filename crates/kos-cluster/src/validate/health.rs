//! `healthCheck` of `spec.controlPlane` and of each node pool, read with Cluster API's
//! MachineHealthCheck spellings: Go durations (`300s`, `5m`, `1h30m`), `maxUnhealthy` as a count or
//! a percentage, condition statuses `True`, `False` and `Unknown`.

use crate::diagnostics::Code;
use crate::spec::{ConditionStatus, HealthCheck, MaxUnhealthy, UnhealthyCondition};
use crate::tree::Value;

use super::read::{Cx, Field, Obj, boolean, choice, list, scalar};

const DURATION_HELP: &str = "a Go duration as Cluster API writes it: a number and a unit (`h`, `m`, \
                             `s`), e.g. `300s`, `5m` or `1h30m`";

pub(super) fn health_check(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<HealthCheck> {
    let m = Obj::new(
        cx,
        f,
        &[
            "enabled",
            "unhealthyConditions",
            "nodeStartupTimeout",
            "maxUnhealthy",
        ],
    )?;
    let d = HealthCheck::default();
    let enabled = m.or(cx, "enabled", true, boolean);
    let conditions = m.or(
        cx,
        "unhealthyConditions",
        d.unhealthy_conditions,
        |cx, f| list(cx, f, unhealthy_condition),
    );
    let startup = m.or(
        cx,
        "nodeStartupTimeout",
        d.node_startup_timeout_secs,
        |cx, f| duration(cx, f).map(|s| (s > 0).then_some(s)),
    );
    let max = m.or(cx, "maxUnhealthy", d.max_unhealthy, max_unhealthy);
    Some(HealthCheck {
        enabled: enabled?,
        unhealthy_conditions: conditions?,
        node_startup_timeout_secs: startup?,
        max_unhealthy: max?,
    })
}

fn unhealthy_condition(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<UnhealthyCondition> {
    let m = Obj::new(cx, f, &["type", "status", "timeout"])?;
    let condition = m.req(cx, "type", |cx, f| {
        let s = scalar(cx, f)?;
        // A condition type is a Kubernetes qualified name; Node conditions are CamelCase words.
        if s.value.is_empty()
            || !s
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
        {
            return f.invalid(
                cx,
                Code::InvalidValue,
                format!("`{}` is not a condition type", s.value),
                "not a condition type",
                "a Node condition's `type`, e.g. `Ready`, `MemoryPressure` or `DiskPressure`",
            );
        }
        Some(s.value)
    });
    let status = m.req(cx, "status", |cx, f| {
        choice(
            cx,
            f,
            &[
                ("True", ConditionStatus::True),
                ("False", ConditionStatus::False),
                ("Unknown", ConditionStatus::Unknown),
            ],
        )
        .map(|s| s.value)
    });
    let timeout = m.req(cx, "timeout", duration);
    Some(UnhealthyCondition {
        condition: condition?,
        status: status?,
        timeout_secs: timeout?,
    })
}

/// `5`, `40%`: a count or a percentage (0–100).
fn max_unhealthy(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<MaxUnhealthy> {
    const HELP: &str = "a number of nodes (`2`) or a percentage of the group's nodes (`40%`, at \
                        most `100%`)";
    if let Value::Int(n) = f.node.value {
        return match u32::try_from(n) {
            Ok(n) => Some(MaxUnhealthy::Count(n)),
            Err(_) => f.invalid(
                cx,
                Code::InvalidValue,
                format!("{n} is negative"),
                "negative",
                HELP,
            ),
        };
    }
    let s = scalar(cx, f)?;
    match s.value.strip_suffix('%').map(str::parse::<u32>) {
        Some(Ok(p)) if p <= 100 => Some(MaxUnhealthy::Percent(p)),
        _ => f.invalid(
            cx,
            Code::InvalidValue,
            format!("`{}` is not a count or a percentage", s.value),
            "not a count or percentage",
            HELP,
        ),
    }
}

/// A Go duration of whole seconds: `300s`, `5m`, `1h30m`, `0s`.
fn duration(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<u64> {
    if let Value::Int(n) = f.node.value {
        return f.invalid(
            cx,
            Code::InvalidValue,
            format!("`{n}` has no unit"),
            "no unit",
            format!("{DURATION_HELP}; `{n}s` for seconds"),
        );
    }
    let s = scalar(cx, f)?;
    match parse_duration(&s.value) {
        Some(secs) => Some(secs),
        None => f.invalid(
            cx,
            Code::InvalidValue,
            format!("`{}` is not a duration", s.value),
            "not a duration",
            DURATION_HELP,
        ),
    }
}

/// Whole seconds of a Go duration made of `h`, `m` and `s` parts (`0` alone too).
pub(crate) fn parse_duration(s: &str) -> Option<u64> {
    if s == "0" {
        return Some(0);
    }
    let mut total: u64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let scale = match unit {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(scale)?)?;
        rest = &rest[digits + 1..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn go_durations_of_hours_minutes_and_seconds() {
        for (text, secs) in [
            ("0", Some(0)),
            ("0s", Some(0)),
            ("300s", Some(300)),
            ("5m", Some(300)),
            ("1h30m", Some(5400)),
            ("1h0m10s", Some(3610)),
            ("", None),
            ("5", None),
            ("m", None),
            ("5d", None),
            ("1.5h", None),
            ("-5m", None),
            ("5m ", None),
            ("99999999999999999999h", None),
        ] {
            assert_eq!(parse_duration(text), secs, "{text:?}");
        }
    }
}
