//! The step list of the bootstrap script a node was given, read from the script itself (the file
//! cloud-init wrote), so the guest follows exactly the steps that script's `main` declares and fails
//! visibly on a step it does not know. Only the shape kos's script has is understood: `step NAME
//! FUNCTION` lines, a `case "$KOS_ROLE" in` with one branch per role, a background `"$SELF" cleanup`,
//! a final `marker "..."`, and the `cleanup) step cleanup cleanup ;;` entry point.

/// One `step NAME FUNCTION` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepCall {
    pub name: String,
    pub function: String,
}

/// One branch of the role `case`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub roles: Vec<String>,
    pub steps: Vec<StepCall>,
    /// Starts `"$SELF" cleanup` in the background after its steps.
    pub spawns_cleanup: bool,
}

/// What `main` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub common: Vec<StepCall>,
    pub branches: Vec<Branch>,
    /// The marker written after the branch (`bootstrap ok`).
    pub final_marker: Option<String>,
    /// The step the `cleanup` entry point runs.
    pub cleanup: Option<StepCall>,
}

impl Plan {
    /// The steps for a role: common ones, then the role's branch; `None` for a role no branch has.
    pub fn for_role(&self, role: &str) -> Option<(Vec<StepCall>, bool)> {
        let b = self
            .branches
            .iter()
            .find(|b| b.roles.iter().any(|r| r == role))?;
        Some((
            self.common.iter().chain(&b.steps).cloned().collect(),
            b.spawns_cleanup,
        ))
    }

    /// Every step name the script can run, in declaration order, `cleanup` last.
    pub fn all_steps(&self) -> Vec<StepCall> {
        let mut v: Vec<StepCall> = self.common.clone();
        for b in &self.branches {
            v.extend(b.steps.iter().cloned());
        }
        v.extend(self.cleanup.iter().cloned());
        v
    }
}

fn step_call(line: &str) -> Option<StepCall> {
    let mut w = line.split_whitespace();
    (w.next()? == "step").then_some(())?;
    let name = w.next()?.to_owned();
    let function = w.next()?.trim_end_matches(";;").to_owned();
    Some(StepCall { name, function })
}

/// Reads `main` and the entry points out of the script.
pub fn parse(script: &str) -> Result<Plan, String> {
    let lines: Vec<&str> = script.lines().map(str::trim).collect();
    let start = lines
        .iter()
        .position(|l| *l == "main() {")
        .ok_or("the bootstrap script has no main() function")?;
    let mut plan = Plan {
        common: Vec::new(),
        branches: Vec::new(),
        final_marker: None,
        cleanup: None,
    };
    let mut in_case = false;
    let mut current: Option<Branch> = None;
    let mut end = None;
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        if *l == "}" {
            end = Some(i);
            break;
        }
        if l.starts_with("case \"$KOS_ROLE\" in") {
            in_case = true;
            continue;
        }
        if in_case {
            if *l == "esac" {
                in_case = false;
            } else if *l == ";;" {
                if let Some(b) = current.take() {
                    plan.branches.push(b);
                }
            } else if let Some(roles) = l.strip_suffix(')').filter(|r| !r.starts_with('*')) {
                current = Some(Branch {
                    roles: roles.split('|').map(|r| r.trim().to_owned()).collect(),
                    steps: Vec::new(),
                    spawns_cleanup: false,
                });
            } else if let Some(b) = current.as_mut() {
                if let Some(s) = step_call(l) {
                    b.steps.push(s);
                } else if l.contains("\"$SELF\" cleanup") {
                    b.spawns_cleanup = true;
                }
            }
            continue;
        }
        if let Some(s) = step_call(l) {
            plan.common.push(s);
        } else if let Some(m) = l
            .strip_prefix("marker \"")
            .and_then(|m| m.strip_suffix('"'))
        {
            plan.final_marker = Some(m.to_owned());
        }
    }
    let end = end.ok_or("main() of the bootstrap script does not end")?;
    plan.cleanup = lines[end..].iter().find_map(|l| {
        let rest = l.strip_prefix("cleanup)")?;
        step_call(rest.trim())
    });
    if plan.branches.is_empty() {
        return Err("main() of the bootstrap script has no role branches".into());
    }
    Ok(plan)
}

/// The arguments a function passes to `kubeadm_retry` after its attempt count (e.g. `init
/// --upload-certs ...`), so the guest runs kubeadm with the flags the script really gives it.
pub fn kubeadm_args(script: &str, function: &str) -> Option<Vec<String>> {
    let header = format!("{function}() {{");
    let mut lines = script
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != header)
        .skip(1);
    lines
        .by_ref()
        .take_while(|l| *l != "}")
        .find(|l| l.starts_with("kubeadm_retry "))
        .map(|l| l.split_whitespace().skip(2).map(str::to_owned).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SCRIPT: &str = "x() {\n  kubeadm_retry \"$N\" init --upload-certs\n}\nmain() {\n  step a fa\n  case \"$KOS_ROLE\" in\n    init)\n      step b fb\n      \"$SELF\" cleanup &\n      ;;\n    join | worker)\n      step c fc\n      ;;\n    *)\n      marker \"a failed\"\n      ;;\n  esac\n  marker \"bootstrap ok\"\n}\ncase \"${1:-run}\" in\n  cleanup) step cleanup cleanup ;;\nesac\n";

    #[test]
    fn main_and_entry_points_are_read() {
        let p = parse(SCRIPT).unwrap();
        let (steps, cleanup) = p.for_role("init").unwrap();
        assert_eq!(
            steps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(cleanup);
        assert_eq!(p.for_role("worker").unwrap().0[1].function, "fc");
        assert!(p.for_role("nope").is_none());
        assert_eq!(p.final_marker.as_deref(), Some("bootstrap ok"));
        assert_eq!(
            p.cleanup.as_ref().map(|c| c.function.as_str()),
            Some("cleanup")
        );
        assert_eq!(
            kubeadm_args(SCRIPT, "x").unwrap(),
            ["init", "--upload-certs"]
        );
    }
}
