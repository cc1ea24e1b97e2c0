//! The node's netfilter rules as the bootstrap script sets them, and who they let reach the metadata
//! service. The guest runs no shell, but the rules are read from the script's own functions (the
//! `local rule=(…)` arrays and the `"$KOS_IPTABLES" … -I CHAIN …` lines, with the node's environment
//! substituted), so a rule in the wrong table or chain, or for the wrong address, changes what a pod
//! sees here exactly as it would on a real node.
//!
//! Paths through netfilter (iptables(8), "TABLES"): a packet a pod sends arrives on the pod's interface
//! and goes through `raw PREROUTING`, then, routed off the node towards the metadata service,
//! `filter FORWARD`. A packet a local process sends (root, any daemon, a hostNetwork pod: they share
//! the node's network namespace) goes through `raw OUTPUT`, then `filter OUTPUT`. A rule matches when
//! its `-s` and `-d` (if given) contain the packet's source and destination; `-j DROP` ends it.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::bootstrap::env::Env;

/// One rule the script inserted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rule {
    pub table: String,
    pub chain: String,
    pub source: Option<IpNet>,
    pub destination: Option<IpNet>,
    pub target: String,
}

/// Who sends a packet from the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A pod on the pod network, from this address.
    Pod(IpAddr),
    /// A process in the node's network namespace: root, a daemon, or a hostNetwork pod.
    Local(IpAddr),
}

impl Rule {
    fn matches(&self, from: IpAddr, to: IpAddr) -> bool {
        self.source.is_none_or(|s| s.contains(&from))
            && self.destination.is_none_or(|d| d.contains(&to))
    }
}

/// Whether a packet from `origin` to `to` gets through `rules`.
pub fn passes(rules: &[Rule], origin: Origin, to: IpAddr) -> bool {
    let (from, path): (IpAddr, [(&str, &str); 2]) = match origin {
        Origin::Pod(ip) => (ip, [("raw", "PREROUTING"), ("filter", "FORWARD")]),
        Origin::Local(ip) => (ip, [("raw", "OUTPUT"), ("filter", "OUTPUT")]),
    };
    for (table, chain) in path {
        // Inserted with `-I CHAIN 1`, so the newest is first; only DROP and ACCEPT end a chain here.
        let verdict = rules
            .iter()
            .rev()
            .filter(|r| r.table == table && r.chain == chain && r.matches(from, to))
            .map(|r| r.target.as_str())
            .find(|t| matches!(*t, "DROP" | "REJECT" | "ACCEPT"));
        if matches!(verdict, Some("DROP" | "REJECT")) {
            return false;
        }
    }
    true
}

/// The rules `function` of the script inserts (and the functions it calls by name, one level),
/// with `env`'s values for the `$KOS_*` variables. A rule that does not parse as iptables would
/// parse it is an error with iptables' own words.
pub fn rules_of(script: &str, function: &str, env: &Env) -> Result<Vec<Rule>, String> {
    rules_when(script, function, env, &|_| false)
}

/// [`rules_of`], also following `if [ -e "$FILE" ]; then f; fi` lines, where `FILE` is one of the
/// script's `readonly` paths and `exists` says whether the node has it.
pub fn rules_when(
    script: &str,
    function: &str,
    env: &Env,
    exists: &dyn Fn(&str) -> bool,
) -> Result<Vec<Rule>, String> {
    let body = body(script, function).ok_or_else(|| format!("{function}: command not found"))?;
    let mut out = Vec::new();
    for line in &body {
        let called = match conditional(line) {
            Some((var, f)) => readonly(script, var).filter(|path| exists(path)).map(|_| f),
            None => Some(line.as_str()),
        };
        let Some(word) = called.filter(|w| !w.contains(' ')) else {
            continue;
        };
        if word != function && body_exists(script, word) {
            out.extend(inserted(script, word, env)?);
        }
    }
    out.extend(inserted(script, function, env)?);
    Ok(out)
}

/// The function an entry point of the script runs (`NAME) f ;;` in its last `case`).
pub fn entry_point(script: &str, name: &str) -> Option<String> {
    let prefix = format!("{name})");
    script.lines().map(str::trim).find_map(|l| {
        let f = l.strip_prefix(&prefix)?.trim().strip_suffix(";;")?.trim();
        (!f.is_empty() && !f.contains(' ')).then(|| f.to_owned())
    })
}

/// `(VAR, f)` of `if [ -e "$VAR" ]; then f; fi`.
fn conditional(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("if [ -e \"$")?;
    let (var, rest) = rest.split_once("\" ]; then ")?;
    let f = rest.strip_suffix("; fi")?;
    Some((var, f.trim()))
}

/// The value of `readonly VAR=value` (a plain path).
fn readonly(script: &str, var: &str) -> Option<String> {
    let prefix = format!("readonly {var}=");
    script.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&prefix)
            .map(|v| v.trim_matches('"').to_owned())
    })
}

fn body_exists(script: &str, function: &str) -> bool {
    !function.is_empty() && body(script, function).is_some()
}

/// The lines of `function`'s body in `script`, trimmed.
pub(crate) fn body(script: &str, function: &str) -> Option<Vec<String>> {
    let header = format!("{function}() {{");
    let mut lines = script.lines().map(str::trim);
    lines.by_ref().find(|l| *l == header)?;
    Some(lines.take_while(|l| *l != "}").map(str::to_owned).collect())
}

/// The `-I` insertions of one function's body.
fn inserted(script: &str, function: &str, env: &Env) -> Result<Vec<Rule>, String> {
    let Some(lines) = body(script, function) else {
        return Ok(Vec::new());
    };
    let mut rule_words: Vec<String> = Vec::new();
    let mut out = Vec::new();
    // Continuation lines (`||` at the end) belong to the command before.
    let mut joined: Vec<String> = Vec::new();
    for l in lines {
        match joined.last_mut() {
            Some(prev) if prev.ends_with("||") || prev.ends_with('\\') => {
                prev.push(' ');
                prev.push_str(&l);
            }
            _ => joined.push(l),
        }
    }
    for line in joined {
        if let Some(array) = line
            .strip_prefix("local rule=(")
            .and_then(|r| r.strip_suffix(')'))
        {
            rule_words = words(array, env)?;
            continue;
        }
        // `A -C … 2>/dev/null || A -I …`: only the insertion changes the rules.
        for command in line.split("||").map(str::trim) {
            let Some(rest) = command.strip_prefix("\"$KOS_IPTABLES\"") else {
                continue;
            };
            let mut args = words(rest, env)?;
            if let Some(i) = args.iter().position(|a| a == "${rule[@]}") {
                args.splice(i..=i, rule_words.iter().cloned());
            }
            if let Some(rule) = insertion(&args)? {
                out.push(rule);
            }
        }
    }
    Ok(out)
}

/// The words of a command, double-quoted `$VAR`s replaced from `env`; redirections dropped.
fn words(text: &str, env: &Env) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for w in text.split_whitespace() {
        if w.starts_with("2>") || w.starts_with('>') {
            continue;
        }
        let unquoted = w.trim_matches('"');
        let value = match unquoted.strip_prefix('$') {
            Some(var) if var.starts_with("KOS_") => env.get(var)?.to_owned(),
            _ => unquoted.to_owned(),
        };
        out.push(value);
    }
    Ok(out)
}

/// An `-I CHAIN [n] …` command's rule, `None` for any other (`-C`, `-A` is not used by the script).
fn insertion(args: &[String]) -> Result<Option<Rule>, String> {
    let mut table = "filter".to_owned();
    let mut chain = None;
    let mut source = None;
    let mut destination = None;
    let mut target = None;
    let mut i = 0;
    let net = |s: &str| -> Result<IpNet, String> {
        s.parse::<IpNet>()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| format!("iptables v1.8.10 (nf_tables): host/network `{s}' not found"))
    };
    while i < args.len() {
        let next = |i: usize| args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "-t" => {
                table = next(i);
                i += 1;
            }
            "-I" => {
                chain = Some(next(i));
                i += 1;
            }
            "-C" | "-A" | "-D" => return Ok(None),
            "-s" => {
                source = Some(net(&next(i))?);
                i += 1;
            }
            "-d" => {
                destination = Some(net(&next(i))?);
                i += 1;
            }
            "-j" => {
                target = Some(next(i));
                i += 1;
            }
            "-m" | "--comment" => i += 1,
            _ => {}
        }
        i += 1;
    }
    let Some(chain) = chain else {
        return Ok(None);
    };
    let valid = matches!(
        (table.as_str(), chain.as_str()),
        ("raw", "PREROUTING" | "OUTPUT") | ("filter", "INPUT" | "FORWARD" | "OUTPUT")
    );
    if !valid {
        return Err(format!(
            "iptables: No chain/target/match by that name. ({table} {chain})"
        ));
    }
    Ok(Some(Rule {
        table,
        chain,
        source,
        destination,
        target: target.ok_or("iptables: no target (-j) given")?,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const META: &str = "169.254.169.254";

    fn env() -> Env {
        Env::parse(
            "KOS_POD_CIDR='10.244.0.0/16'\nKOS_METADATA_ADDR='169.254.169.254/32'\nKOS_IPTABLES='iptables'\n",
        )
        .unwrap()
    }

    const SCRIPT: &str = r#"
block() {
  local rule=(-s "$KOS_POD_CIDR" -d "$KOS_METADATA_ADDR" -m comment --comment kos-metadata-block -j DROP)
  "$KOS_IPTABLES" -w -t raw -C PREROUTING "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t raw -I PREROUTING 1 "${rule[@]}"
  "$KOS_IPTABLES" -w -t filter -C FORWARD "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t filter -I FORWARD 1 "${rule[@]}"
}
block_step() {
  block
  systemctl enable x.service
}
close() {
  local rule=(-d "$KOS_METADATA_ADDR" -m comment --comment kos-metadata-close -j DROP)
  "$KOS_IPTABLES" -w -t filter -C OUTPUT "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t filter -I OUTPUT 1 "${rule[@]}"
}
wrong_close() {
  local rule=(-d "$KOS_METADATA_ADDR" -j DROP)
  "$KOS_IPTABLES" -w -t filter -I FORWARD 1 "${rule[@]}"
}
"#;

    #[test]
    fn pods_are_blocked_at_once_and_the_node_itself_once_closed() {
        let meta: IpAddr = META.parse().unwrap();
        let pod = Origin::Pod("10.244.1.7".parse().unwrap());
        let host = Origin::Local("10.0.0.5".parse().unwrap());
        let mut rules = rules_of(SCRIPT, "block_step", &env()).unwrap();
        assert_eq!(rules.len(), 2);
        assert!(!passes(&rules, pod, meta));
        // A hostNetwork pod is a local process: the pod-CIDR rules do not see it.
        assert!(passes(&rules, host, meta));
        rules.extend(rules_of(SCRIPT, "close", &env()).unwrap());
        assert!(!passes(&rules, host, meta));
        // Other destinations are untouched.
        assert!(passes(&rules, host, "10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn a_close_in_the_wrong_chain_leaves_host_network_pods_reading_user_data() {
        let meta: IpAddr = META.parse().unwrap();
        let rules = rules_of(SCRIPT, "wrong_close", &env()).unwrap();
        assert!(passes(
            &rules,
            Origin::Local("10.0.0.5".parse().unwrap()),
            meta
        ));
    }

    #[test]
    fn at_boot_the_close_comes_back_only_where_the_node_had_closed() {
        let script = format!(
            "readonly CLOSED=/etc/kos/closed\n{SCRIPT}boot() {{\n  block\n  if [ -e \"$CLOSED\" ]; then close; fi\n}}\n\
             case \"${{1:-run}}\" in\n  metadata-block) boot ;;\nesac\n"
        );
        assert_eq!(
            entry_point(&script, "metadata-block").as_deref(),
            Some("boot")
        );
        let host = Origin::Local("10.0.0.5".parse().unwrap());
        let meta: IpAddr = META.parse().unwrap();
        let open = rules_when(&script, "boot", &env(), &|_| false).unwrap();
        assert!(passes(&open, host, meta));
        let closed = rules_when(&script, "boot", &env(), &|p| p == "/etc/kos/closed").unwrap();
        assert!(!passes(&closed, host, meta));
    }

    #[test]
    fn what_iptables_refuses_is_refused() {
        let bad = "f() {\n  \"$KOS_IPTABLES\" -w -t raw -I FORWARD 1 -j DROP\n}\n";
        assert!(rules_of(bad, "f", &env()).unwrap_err().contains("No chain"));
        let bad = "f() {\n  \"$KOS_IPTABLES\" -w -I OUTPUT 1 -d nowhere -j DROP\n}\n";
        assert!(
            rules_of(bad, "f", &env())
                .unwrap_err()
                .contains("not found")
        );
        assert!(rules_of(bad, "g", &env()).is_err());
    }
}
