//! The Kubernetes CEL library functions (k8s.io/apiserver/pkg/cel/library) the fake implements:
//! the `net.CIDR` library (`cidr.go`), the part of the `net.IP` one (`ip.go`) it leans on, and the
//! regex library (`regex.go`: `find`, `findAll`) and the lists library's `sum` (`lists.go`). All
//! are in the base environment of every minor kos supports (since 1.31; the regex and lists
//! libraries since 1.24). Their behaviour follows upstream's
//! code, quirks included (`containsCIDR` compares the other range's address under this range's
//! length, unmasked).

use std::net::IpAddr;
use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::objects::Opaque;
use cel::{Context, ExecutionError, Value};
use ipnet::IpNet;

/// The names of the functions [`register`] adds.
pub const FUNCTIONS: &[&str] = &[
    "cidr",
    "isCIDR",
    "containsIP",
    "containsCIDR",
    "ip",
    "isIP",
    "masked",
    "prefixLength",
    "family",
    "find",
    "findAll",
    "sum",
];

/// Adds the library's functions to an evaluation's context.
pub fn register(cx: &mut Context<'_, '_>) {
    let added = [
        cx.add_function("cidr", cidr),
        cx.add_function("isCIDR", is_cidr),
        cx.add_function("containsIP", contains_ip),
        cx.add_function("containsCIDR", contains_cidr),
        cx.add_function("ip", ip),
        cx.add_function("isIP", is_ip),
        cx.add_function("masked", masked),
        cx.add_function("prefixLength", prefix_length),
        cx.add_function("family", family),
        cx.add_function("find", find),
        cx.add_function("findAll", find_all),
        cx.add_function("sum", sum),
    ];
    // Only a name the standard library declares conflicts, and none of these is one.
    for e in added.into_iter().filter_map(Result::err) {
        tracing::error!(error = %e, "CEL library function not added");
    }
}

/// `net.CIDR`: the prefix as written (host bits kept, as netip.Prefix keeps them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr(pub IpNet);

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

/// `net.IP`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ip(pub IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

fn err(function: &str, message: String) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// Upstream's `parseCIDR`: Go's `netip.ParsePrefix` (no leading zeros in the address or the
/// length, no zone), then no IPv4-mapped IPv6 address.
fn parse_cidr(raw: &str) -> Result<IpNet, String> {
    let bad = || {
        format!(
            "network address parse error during conversion from string: netip.ParsePrefix({raw:?}): invalid prefix"
        )
    };
    let (addr, bits) = raw.split_once('/').ok_or_else(bad)?;
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return Err(format!(
            "network address parse error during conversion from string: netip.ParsePrefix({raw:?}): bad bits after slash: {bits:?}"
        ));
    }
    let addr = parse_ip(addr).map_err(|_| bad())?;
    let bits: u8 = bits.parse().map_err(|_| bad())?;
    let net = IpNet::new(addr, bits).map_err(|_| bad())?;
    if let IpAddr::V6(a) = addr
        && a.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
    }
    Ok(net)
}

/// Go's `netip.ParseAddr` as upstream's `parseIPAddr` uses it: no zone, no IPv4-mapped IPv6.
fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if raw.contains('%') {
        return Err(format!("IP address with zone value is not allowed: {raw}"));
    }
    let addr: IpAddr = raw
        .parse()
        .map_err(|_| format!("IP Address {raw:?} parse error during conversion from string"))?;
    if let IpAddr::V6(a) = addr
        && a.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
    }
    Ok(addr)
}

fn as_cidr(v: &Value, function: &str) -> Result<IpNet, ExecutionError> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<Cidr>()
            .map(|c| c.0)
            .ok_or_else(|| ExecutionError::no_such_overload(function, vec![])),
        Value::String(s) => parse_cidr(s).map_err(|e| {
            err(
                function,
                format!("network address parse error during conversion from string: {e}"),
            )
        }),
        _ => Err(ExecutionError::no_such_overload(function, vec![])),
    }
}

fn this_cidr(this: &Arc<dyn Opaque>, function: &str) -> Result<IpNet, ExecutionError> {
    this.downcast_ref::<Cidr>()
        .map(|c| c.0)
        .ok_or_else(|| ExecutionError::no_such_overload(function, vec![]))
}

fn cidr(This(s): This<Arc<String>>) -> Result<Value, ExecutionError> {
    parse_cidr(&s)
        .map(|n| Value::Opaque(Arc::new(Cidr(n))))
        .map_err(|e| {
            err(
                "cidr",
                format!("network address parse error during conversion from string: {e}"),
            )
        })
}

fn is_cidr(This(s): This<Arc<String>>) -> bool {
    parse_cidr(&s).is_ok()
}

fn is_ip(This(s): This<Arc<String>>) -> bool {
    parse_ip(&s).is_ok()
}

/// `ip(string)`, and `<CIDR>.ip()`: the address as written.
fn ip(This(v): This<Value>) -> Result<Value, ExecutionError> {
    let addr = match &v {
        Value::String(s) => parse_ip(s).map_err(|e| err("ip", e))?,
        _ => as_cidr(&v, "ip")?.addr(),
    };
    Ok(Value::Opaque(Arc::new(Ip(addr))))
}

fn contains_ip(This(this): This<Arc<dyn Opaque>>, other: Value) -> Result<bool, ExecutionError> {
    let net = this_cidr(&this, "containsIP")?;
    let addr = match &other {
        Value::String(s) => parse_ip(s).map_err(|e| err("containsIP", e))?,
        Value::Opaque(o) => o
            .downcast_ref::<Ip>()
            .map(|i| i.0)
            .ok_or_else(|| ExecutionError::no_such_overload("containsIP", vec![]))?,
        _ => return Err(ExecutionError::no_such_overload("containsIP", vec![])),
    };
    Ok(net.contains(&addr))
}

fn contains_cidr(This(this): This<Arc<dyn Opaque>>, other: Value) -> Result<bool, ExecutionError> {
    let net = this_cidr(&this, "containsCIDR")?;
    let other = as_cidr(&other, "containsCIDR")?;
    // Upstream: this.Masked() == PrefixFrom(other.Addr(), this.Bits()), which does not mask.
    let same = IpNet::new(other.addr(), net.prefix_len()).is_ok_and(|o| o == net.trunc());
    Ok(same && net.prefix_len() <= other.prefix_len())
}

fn masked(This(this): This<Arc<dyn Opaque>>) -> Result<Value, ExecutionError> {
    let net = this_cidr(&this, "masked")?;
    Ok(Value::Opaque(Arc::new(Cidr(net.trunc()))))
}

fn prefix_length(This(this): This<Arc<dyn Opaque>>) -> Result<i64, ExecutionError> {
    Ok(i64::from(this_cidr(&this, "prefixLength")?.prefix_len()))
}

fn family(This(this): This<Arc<dyn Opaque>>) -> Result<i64, ExecutionError> {
    match this.downcast_ref::<Ip>() {
        Some(Ip(IpAddr::V4(_))) => Ok(4),
        Some(Ip(IpAddr::V6(_))) => Ok(6),
        None => Err(ExecutionError::no_such_overload("family", vec![])),
    }
}

/// Go's `regexp.Compile` as upstream's regex library reports its failure. The `regex` crate reads
/// RE2's syntax (both refuse backreferences and lookaround).
fn regex(pattern: &str, function: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(pattern).map_err(|e| err(function, format!("Illegal regex: {e}")))
}

/// `<string>.find(<regex>)`: the first match, `""` when there is none.
fn find(This(s): This<Arc<String>>, pattern: Arc<String>) -> Result<Value, ExecutionError> {
    let re = regex(&pattern, "find")?;
    let found = re.find(&s).map_or("", |m| m.as_str());
    Ok(Value::String(Arc::new(found.to_owned())))
}

/// `<string>.findAll(<regex>)` and `<string>.findAll(<regex>, <limit>)`: every match, or the
/// first `limit` (Go's `FindAllString`: a negative limit is no limit, 0 gives none).
fn find_all(
    This(s): This<Arc<String>>,
    Arguments(args): Arguments,
) -> Result<Value, ExecutionError> {
    let (pattern, limit) = match args.as_slice() {
        [Value::String(p)] => (p, -1),
        [Value::String(p), Value::Int(n)] => (p, *n),
        _ => return Err(ExecutionError::no_such_overload("findAll", vec![])),
    };
    let re = regex(pattern, "findAll")?;
    let all = re
        .find_iter(&s)
        .map(|m| Value::String(Arc::new(m.as_str().to_owned())));
    let found: Vec<Value> = match usize::try_from(limit) {
        Ok(n) => all.take(n).collect(),
        Err(_) => all.collect(),
    };
    Ok(Value::List(Arc::new(found)))
}

/// `<list>.sum()`: the sum of a list of ints, uints or doubles (upstream's `lists.go`; its
/// durations are not modelled), `0` for an empty list; an int or uint that overflows is an error,
/// as CEL's `+` is.
fn sum(This(list): This<Arc<Vec<Value>>>) -> Result<Value, ExecutionError> {
    let overflow = || err("sum", "integer overflow".into());
    let mut items = list.iter();
    let Some(first) = items.next() else {
        return Ok(Value::Int(0));
    };
    let mut total = first.clone();
    for v in items {
        total = match (&total, v) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or_else(overflow)?),
            (Value::UInt(a), Value::UInt(b)) => {
                Value::UInt(a.checked_add(*b).ok_or_else(overflow)?)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            _ => return Err(ExecutionError::no_such_overload("sum", vec![])),
        };
    }
    match total {
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => Ok(total),
        _ => Err(ExecutionError::no_such_overload("sum", vec![])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cel::Env;

    fn eval(expr: &str) -> Result<Value, ExecutionError> {
        let env = Arc::new(Env::stdlib());
        let program = env.compile(expr).expect("compiles");
        let mut cx = Context::with_env(env);
        register(&mut cx);
        program.execute(&cx)
    }

    fn cidr_of(s: &str) -> Value {
        Value::Opaque(Arc::new(Cidr(s.parse().expect("cidr"))))
    }

    fn ip_of(s: &str) -> Value {
        Value::Opaque(Arc::new(Ip(s.parse().expect("ip"))))
    }

    /// The cases of upstream's `TestCIDR` (cidr_test.go) and the examples of cidr.go's doc.
    #[test]
    fn cidr_functions_give_upstreams_values() {
        for (expr, want) in [
            ("cidr('192.168.0.0/24')", cidr_of("192.168.0.0/24")),
            ("cidr(dyn('192.168.0.0/24'))", cidr_of("192.168.0.0/24")),
            (
                "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
                true.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
                false.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
                true.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsIP('192.168.1.1')",
                false.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))",
                true.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/23'))",
                false.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/25')",
                true.into(),
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/23')",
                false.into(),
            ),
            (
                "cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')",
                false.into(),
            ),
            ("cidr('192.168.0.0/24').ip()", ip_of("192.168.0.0")),
            ("cidr('192.168.0.1/24').ip()", ip_of("192.168.0.1")),
            ("cidr('192.168.0.0/24').masked()", cidr_of("192.168.0.0/24")),
            ("cidr('192.168.0.1/24').masked()", cidr_of("192.168.0.0/24")),
            (
                "cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()",
                true.into(),
            ),
            (
                "cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()",
                false.into(),
            ),
            ("cidr('192.168.0.0/24').prefixLength()", 24.into()),
            ("cidr('2001:db8::/32')", cidr_of("2001:db8::/32")),
            (
                "cidr('2001:db8::/32').containsIP(ip('2001:db8::1'))",
                true.into(),
            ),
            (
                "cidr('2001:db8::/32').containsIP(ip('2001:dc8::1'))",
                false.into(),
            ),
            (
                "cidr('2001:db8::/32').containsIP('2001:db8::1')",
                true.into(),
            ),
            (
                "cidr('2001:db8::/32').containsIP('2001:dc8::1')",
                false.into(),
            ),
            (
                "cidr('2001:db8::/32').containsCIDR(cidr('2001:db8::/33'))",
                true.into(),
            ),
            (
                "cidr('2001:db8::/32').containsCIDR(cidr('2001:db8::/31'))",
                false.into(),
            ),
            (
                "cidr('2001:db8::/32').containsCIDR('2001:db8::/33')",
                true.into(),
            ),
            (
                "cidr('2001:db8::/32').containsCIDR('2001:db8::/31')",
                false.into(),
            ),
            ("cidr('2001:db8::/32').ip()", ip_of("2001:db8::")),
            ("cidr('2001:db8::/32').masked()", cidr_of("2001:db8::/32")),
            ("cidr('2001:db8:1::/32').masked()", cidr_of("2001:db8::/32")),
            ("cidr('2001:db8::/32').prefixLength()", 32.into()),
            ("cidr('::1/128').prefixLength()", 128.into()),
            ("cidr('192.168.0.1/24').ip().family()", 4.into()),
            ("cidr('::1/128').ip().family()", 6.into()),
            ("isCIDR('10.0.0.0/8')", true.into()),
            ("isCIDR('10.0.0.0/')", false.into()),
            ("isCIDR('10.0.0.0/08')", false.into()),
            ("isCIDR('010.0.0.0/8')", false.into()),
            ("isCIDR('::ffff:10.0.0.0/104')", false.into()),
            ("isCIDR('10.0.0.0')", false.into()),
            ("isIP('1.2.3.4')", true.into()),
            ("isIP('fe80::1%eth0')", false.into()),
        ] {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
        for bad in ["cidr('192.168.0.0/')", "cidr('2001:db8::/')", "ip('1.2.3')"] {
            assert!(eval(bad).is_err(), "{bad}");
        }
    }
    /// Upstream's `lists.go` `sum`: ints, uints and doubles summed, `0` for an empty list; an
    /// overflow or a list of other values an error.
    #[test]
    fn sum_gives_upstreams_values() {
        for (expr, want) in [
            ("[1, 2, 3].sum()", Value::Int(6)),
            ("[].sum()", Value::Int(0)),
            ("[1u, 2u].sum()", Value::UInt(3)),
            ("[0.5, 0.25].sum()", Value::Float(0.75)),
            ("[{'c': 2}, {'c': 3}].map(p, p.c).sum()", Value::Int(5)),
        ] {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
        for bad in [
            "[9223372036854775807, 1].sum()",
            "['a', 'b'].sum()",
            "[1, 2u].sum()",
            "['a'].sum()",
        ] {
            assert!(eval(bad).is_err(), "{bad}");
        }
    }

    /// Upstream's `regex.go`: the first match or `""`, every match or the first `limit`, an
    /// illegal pattern an error.
    #[test]
    fn regex_functions_give_upstreams_values() {
        let strings = |v: &[&str]| -> Value {
            Value::List(Arc::new(
                v.iter()
                    .map(|s| Value::String(Arc::new((*s).to_owned())))
                    .collect(),
            ))
        };
        for (expr, want) in [
            (
                "'abc 123'.find('[0-9]+')",
                Value::String(Arc::new("123".into())),
            ),
            (
                "'abc 123'.find('[0-9]*')",
                Value::String(Arc::new(String::new())),
            ),
            (
                "'abc'.find('[0-9]+')",
                Value::String(Arc::new(String::new())),
            ),
            (
                "'Web_1'.find('[^a-z0-9-]')",
                Value::String(Arc::new("W".into())),
            ),
            ("'123 abc 456'.findAll('[0-9]+')", strings(&["123", "456"])),
            ("'123 abc 456'.findAll('[0-9]+', 1)", strings(&["123"])),
            ("'123 abc 456'.findAll('[0-9]+', 0)", strings(&[])),
            (
                "'123 abc 456'.findAll('[0-9]+', -1)",
                strings(&["123", "456"]),
            ),
            (
                "'abc 123'.findAll('[0-9]*')",
                strings(&["", "", "", "", "123"]),
            ),
        ] {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
        for bad in [
            "'abc'.find('[')",
            "'abc'.findAll('(')",
            "'abc'.findAll('a', 'b')",
        ] {
            assert!(eval(bad).is_err(), "{bad}");
        }
    }
}
