//! The step list of the bootstrap script a node was given, read from the script itself (the file
//! cloud-init wrote), so the guest follows exactly the steps that script's `main` declares and fails
//! visibly on a step it does not know. Only the shape kos's script has is understood: `step NAME
//! FUNCTION` lines, a `case "$KOS_ROLE" in` with one branch per role, a background `"$SELF" cleanup`,
//! a final `marker "..."`, the `cleanup) step cleanup cleanup ;;` entry point, and the resume unit: a
//! branch's `RESUMABLE=true` line, after which a failed step is tried again by the `systemd-run …
//! "$SELF" resume` unit (its `--on-active=` and `RestartSec=`, in seconds) through the `resume)`
//! entry point.

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
    /// The index in `steps` from which a failed step is tried again (`RESUMABLE=true` before it).
    pub resumable_from: Option<usize>,
}

/// The transient systemd unit that runs the script again after a resumable step failed: first
/// `--on-active=` seconds later, then, while it fails, every `RestartSec=` (`Restart=on-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumeUnit {
    pub first_secs: u64,
    pub restart_secs: u64,
}

/// A role's steps: the common ones, then its branch's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSteps {
    pub steps: Vec<StepCall>,
    pub spawns_cleanup: bool,
    /// The index in `steps` from which a failed step is tried again by the resume unit.
    pub resumable_from: Option<usize>,
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
    /// The resume unit, when the script starts one and has the `resume)` entry point.
    pub resume: Option<ResumeUnit>,
}

impl Plan {
    /// The steps for a role: common ones, then the role's branch; `None` for a role no branch has.
    pub fn for_role(&self, role: &str) -> Option<RoleSteps> {
        let b = self
            .branches
            .iter()
            .find(|b| b.roles.iter().any(|r| r == role))?;
        Some(RoleSteps {
            steps: self.common.iter().chain(&b.steps).cloned().collect(),
            spawns_cleanup: b.spawns_cleanup,
            resumable_from: b.resumable_from.map(|i| i + self.common.len()),
        })
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
        resume: None,
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
                    resumable_from: None,
                });
            } else if let Some(b) = current.as_mut() {
                if let Some(s) = step_call(l) {
                    b.steps.push(s);
                } else if *l == "RESUMABLE=true" {
                    b.resumable_from.get_or_insert(b.steps.len());
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
    let resume_entry = lines[end..].contains(&"resume)");
    plan.resume = resume_unit(script).filter(|_| resume_entry);
    Ok(plan)
}

/// The `systemd-run … "$SELF" resume` line (continuation lines joined): a unit that restarts on
/// failure, with its first delay and restart interval in plain seconds.
fn resume_unit(script: &str) -> Option<ResumeUnit> {
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("systemd-run ") && l.contains("\"$SELF\" resume"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let value = |prefix: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(prefix))
            .and_then(|v| v.parse::<u64>().ok())
    };
    words
        .contains(&"--property=Restart=on-failure")
        .then_some(())?;
    Some(ResumeUnit {
        first_secs: value("--on-active=")?,
        restart_secs: value("--property=RestartSec=")?,
    })
}

/// The command a function runs under `retry N` (e.g. `local_kubectl apply -f "$CNI_FILE"`): which
/// kubectl a step uses is the script's choice, and the guest follows it.
pub fn retried_command(script: &str, function: &str) -> Option<Vec<String>> {
    retried_commands(script, function).into_iter().next()
}

/// Every command a function runs through `retry N`, in order (e.g. the addons step's applies and
/// its wait), with the retry count dropped.
pub fn retried_commands(script: &str, function: &str) -> Vec<Vec<String>> {
    let header = format!("{function}() {{");
    script
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != header)
        .skip(1)
        .take_while(|l| *l != "}")
        .filter(|l| l.starts_with("retry "))
        .map(|l| l.split_whitespace().skip(2).map(str::to_owned).collect())
        .collect()
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

    const SCRIPT: &str = "x() {\n  kubeadm_retry \"$N\" init --upload-certs\n}\nlater() {\n  systemd-run --unit=u --on-active=60 --property=Restart=on-failure \\\n    --property=RestartSec=30 \"$SELF\" resume >>\"$LOG\" 2>&1\n}\nmain() {\n  step a fa\n  case \"$KOS_ROLE\" in\n    init)\n      step b fb\n      RESUMABLE=true\n      step d fd\n      \"$SELF\" cleanup &\n      ;;\n    join | worker)\n      step c fc\n      ;;\n    *)\n      marker \"a failed\"\n      ;;\n  esac\n  marker \"bootstrap ok\"\n}\ncase \"${1:-run}\" in\n  cleanup) step cleanup cleanup ;;\n  resume)\n    RESUMING=true\n    main\n    ;;\nesac\n";

    #[test]
    fn main_and_entry_points_are_read() {
        let p = parse(SCRIPT).unwrap();
        let init = p.for_role("init").unwrap();
        assert_eq!(
            init.steps
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "d"]
        );
        assert!(init.spawns_cleanup);
        // `d`, after RESUMABLE=true, is the first step the resume unit tries again.
        assert_eq!(init.resumable_from, Some(2));
        let worker = p.for_role("worker").unwrap();
        assert_eq!(worker.steps[1].function, "fc");
        assert_eq!(worker.resumable_from, None);
        assert!(p.for_role("nope").is_none());
        assert_eq!(p.final_marker.as_deref(), Some("bootstrap ok"));
        assert_eq!(
            p.cleanup.as_ref().map(|c| c.function.as_str()),
            Some("cleanup")
        );
        assert_eq!(
            p.resume,
            Some(ResumeUnit {
                first_secs: 60,
                restart_secs: 30
            })
        );
        assert_eq!(
            kubeadm_args(SCRIPT, "x").unwrap(),
            ["init", "--upload-certs"]
        );
        // Without the `resume)` entry point, or a unit that restarts, there is no resume unit.
        let p = parse(&SCRIPT.replace("  resume)", "  other)")).unwrap();
        assert_eq!(p.resume, None);
        let p = parse(&SCRIPT.replace("Restart=on-failure", "Restart=no")).unwrap();
        assert_eq!(p.resume, None);
    }
}
