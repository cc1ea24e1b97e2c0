//! The report: flows grouped in sections, each with its verdict and what the verdict rests on, as text
//! for people and JSON for machines.

use std::fmt::Write as _;

use serde::Serialize;

/// Whether a flow gets through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Verdict {
    Allowed,
    Blocked,
    /// Doctor cannot tell from what the cloud shows (the reason says what is missing).
    Unknown {
        reason: String,
    },
    /// Not analysed: the input that says whether it is needed was not given.
    NotChecked {
        reason: String,
    },
}

impl Verdict {
    /// How bad it is, for combining the steps of a path: the worst step decides.
    pub(crate) fn rank(&self) -> u8 {
        match self {
            Verdict::Allowed => 0,
            Verdict::NotChecked { .. } => 1,
            Verdict::Unknown { .. } => 2,
            Verdict::Blocked => 3,
        }
    }

    /// One word for tables.
    #[must_use]
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Blocked => "BLOCKED",
            Verdict::Unknown { .. } => "unknown",
            Verdict::NotChecked { .. } => "not checked",
        }
    }
}

/// The outcome of one check on a flow's path and what it rests on (the rule that admits the traffic,
/// or what is missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    pub evidence: Vec<String>,
}

impl Finding {
    #[must_use]
    pub fn allowed(evidence: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::Allowed,
            evidence: vec![evidence.into()],
        }
    }

    #[must_use]
    pub fn blocked(why: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::Blocked,
            evidence: vec![why.into()],
        }
    }

    #[must_use]
    pub fn unknown(reason: impl Into<String>) -> Finding {
        let reason = reason.into();
        Finding {
            verdict: Verdict::Unknown {
                reason: reason.clone(),
            },
            evidence: vec![reason],
        }
    }

    #[must_use]
    pub fn not_checked(reason: impl Into<String>) -> Finding {
        let reason = reason.into();
        Finding {
            verdict: Verdict::NotChecked {
                reason: reason.clone(),
            },
            evidence: vec![reason],
        }
    }

    /// This step, then `next` on the same path: the worse verdict, both steps' evidence in order.
    #[must_use]
    pub fn then(mut self, next: Finding) -> Finding {
        if next.verdict.rank() > self.verdict.rank() {
            self.verdict = next.verdict;
        }
        self.evidence.extend(next.evidence);
        self
    }

    /// Every finding in turn (an empty list is allowed with no evidence: nothing stood in the way).
    #[must_use]
    pub fn all(findings: impl IntoIterator<Item = Finding>) -> Finding {
        findings.into_iter().fold(
            Finding {
                verdict: Verdict::Allowed,
                evidence: Vec::new(),
            },
            Finding::then,
        )
    }
}

/// One flow a working cluster needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flow {
    /// What it is for (`kubelet`, `LB -> NodePort`).
    pub name: String,
    pub from: String,
    pub to: String,
    /// `tcp/6443`, `udp/8472`, `ipip`.
    pub traffic: String,
    pub verdict: Verdict,
    pub evidence: Vec<String>,
}

impl Flow {
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        from: impl Into<String>,
        to: impl Into<String>,
        traffic: impl Into<String>,
        finding: Finding,
    ) -> Flow {
        Flow {
            name: name.into(),
            from: from.into(),
            to: to.into(),
            traffic: traffic.into(),
            verdict: finding.verdict,
            evidence: finding.evidence,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Section {
    pub title: String,
    pub flows: Vec<Flow>,
}

/// Every flow doctor checked, by section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub cluster: String,
    pub sections: Vec<Section>,
}

impl Report {
    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.sections.iter().flat_map(|s| s.flows.iter())
    }

    /// Some needed flow is blocked.
    #[must_use]
    pub fn blocked(&self) -> bool {
        self.flows().any(|f| f.verdict == Verdict::Blocked)
    }

    /// Counts of allowed, blocked, unknown and not checked flows.
    #[must_use]
    pub fn counts(&self) -> [usize; 4] {
        let mut c = [0; 4];
        for f in self.flows() {
            c[match f.verdict {
                Verdict::Allowed => 0,
                Verdict::Blocked => 1,
                Verdict::Unknown { .. } => 2,
                Verdict::NotChecked { .. } => 3,
            }] += 1;
        }
        c
    }

    /// A table per section (flow, from → to, traffic, verdict), each flow's evidence below it, then
    /// the totals.
    #[must_use]
    pub fn text(&self) -> String {
        let mut out = format!("Connectivity of cluster {}\n", self.cluster);
        for s in &self.sections {
            let _ = writeln!(out, "\n{}", s.title);
            let width = |f: fn(&Flow) -> usize| s.flows.iter().map(f).max().unwrap_or(0);
            let wn = width(|f| f.name.chars().count());
            let wp = width(|f| f.from.chars().count() + f.to.chars().count() + 3);
            let wt = width(|f| f.traffic.chars().count());
            for f in &s.flows {
                let path = format!("{} → {}", f.from, f.to);
                let _ = writeln!(
                    out,
                    "  {:<wn$}  {:<wp$}  {:<wt$}  {}",
                    f.name,
                    path,
                    f.traffic,
                    f.verdict.word()
                );
                for e in &f.evidence {
                    let _ = writeln!(out, "      {e}");
                }
            }
        }
        let [ok, blocked, unknown, unchecked] = self.counts();
        let _ = writeln!(
            out,
            "\n{ok} allowed, {blocked} blocked, {unknown} unknown, {unchecked} not checked"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_as_bad_as_its_worst_step_and_keeps_all_evidence() {
        let f = Finding::allowed("a")
            .then(Finding::unknown("b"))
            .then(Finding::blocked("c"))
            .then(Finding::allowed("d"));
        assert_eq!(f.verdict, Verdict::Blocked);
        assert_eq!(f.evidence, ["a", "b", "c", "d"]);
        let f = Finding::allowed("a").then(Finding::not_checked("n"));
        assert!(matches!(f.verdict, Verdict::NotChecked { .. }));
        assert_eq!(Finding::all([]).verdict, Verdict::Allowed);
    }

    #[test]
    fn a_report_is_blocked_when_one_flow_is() {
        let mut r = Report {
            cluster: "demo".into(),
            sections: vec![Section {
                title: "Nodes".into(),
                flows: vec![Flow::new(
                    "kubelet",
                    "a",
                    "b",
                    "tcp/10250",
                    Finding::allowed("rule x"),
                )],
            }],
        };
        assert!(!r.blocked());
        r.sections[0].flows.push(Flow::new(
            "kubelet",
            "b",
            "a",
            "tcp/10250",
            Finding::blocked("no rule"),
        ));
        assert!(r.blocked());
        let text = r.text();
        assert!(text.contains("b → a"), "{text}");
        assert!(
            text.contains("BLOCKED") && text.contains("      no rule"),
            "{text}"
        );
        assert!(text.contains("1 allowed, 1 blocked"), "{text}");
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(
            json["sections"][0]["flows"][1]["verdict"]["status"],
            "blocked"
        );
    }
}
