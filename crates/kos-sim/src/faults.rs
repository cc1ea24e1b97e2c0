//! Fault injection and rate limiting: the failures real clouds produce, on demand and repeatably.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::clock::SimTime;
use crate::service::Service;

/// One fault rule. A request matches when its method (if given) and path (a regex, searched in the path
/// below the service prefix or in the full path) match; it then fails with `status` with `probability`,
/// at most `count` times.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    #[serde(default)]
    pub id: Option<u64>,
    #[serde(default)]
    pub method: Option<String>,
    /// Regex matched against the full request path (e.g. `^/compute/v2.1/servers$`).
    pub path: String,
    /// Regex the request body must match too (e.g. `"name": "kos-demo-cp-0"`): one object's create
    /// among many, whatever order they are sent in.
    #[serde(default)]
    pub body: Option<String>,
    pub status: u16,
    #[serde(default = "one")]
    pub probability: f64,
    /// Fire at most this many times (unlimited when absent).
    #[serde(default)]
    pub count: Option<u64>,
    /// Let this many matching requests through before the rule starts firing.
    #[serde(default)]
    pub skip: u64,
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// Let the request take effect, then answer with the fault: the ambiguous failure of a real cloud
    /// whose response was lost after the side effect happened.
    #[serde(default)]
    pub after_side_effect: bool,
    /// For a server create: the request succeeds, then the build fails and the server goes to ERROR with
    /// `message` as its fault and `status` as the fault's code, as Nova reports a NoValidHost or
    /// exhausted reschedules (an anti-affinity race) long after it answered 202.
    #[serde(default)]
    pub build_error: bool,
    #[serde(default)]
    pub message: Option<String>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultHit {
    pub rule_id: u64,
    pub status: u16,
    pub retry_after: Option<u64>,
    pub after_side_effect: bool,
    pub build_error: bool,
    pub message: String,
}

#[derive(Debug)]
struct ActiveRule {
    rule: FaultRule,
    re: Regex,
    body: Option<Regex>,
    seen: u64,
    fired: u64,
}

#[derive(Debug)]
pub struct FaultEngine {
    rules: Vec<ActiveRule>,
    next_id: u64,
    rng: StdRng,
    buckets: BTreeMap<Service, Bucket>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid fault rule path regex {path:?}: {source}")]
pub struct BadRule {
    path: String,
    #[source]
    source: regex::Error,
}

impl FaultEngine {
    pub fn new(seed: u64) -> Self {
        FaultEngine {
            rules: Vec::new(),
            next_id: 1,
            rng: StdRng::seed_from_u64(seed),
            buckets: BTreeMap::new(),
        }
    }

    /// Adds a rule and returns its id.
    pub fn add(&mut self, mut rule: FaultRule) -> Result<u64, BadRule> {
        let re = Regex::new(&rule.path).map_err(|source| BadRule {
            path: rule.path.clone(),
            source,
        })?;
        let body = rule
            .body
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|source| BadRule {
                path: rule.body.clone().unwrap_or_default(),
                source,
            })?;
        let id = self.next_id;
        self.next_id += 1;
        rule.id = Some(id);
        self.rules.push(ActiveRule {
            rule,
            re,
            body,
            seen: 0,
            fired: 0,
        });
        Ok(id)
    }

    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.rule.id != Some(id));
        before != self.rules.len()
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules.iter().map(|r| r.rule.clone()).collect()
    }

    pub fn set_rate_limit(&mut self, service: Service, per_sec: Option<f64>) {
        match per_sec {
            Some(rate) if rate > 0.0 => {
                self.buckets.insert(
                    service,
                    Bucket {
                        rate,
                        tokens: rate.max(1.0),
                        last: None,
                    },
                );
            }
            _ => {
                self.buckets.remove(&service);
            }
        }
    }

    pub fn rate_limits(&self) -> BTreeMap<Service, f64> {
        self.buckets.iter().map(|(s, b)| (*s, b.rate)).collect()
    }

    /// Whether a rule looks at request bodies (the gate then reads them before checking).
    pub fn needs_body(&self) -> bool {
        self.rules.iter().any(|r| r.body.is_some())
    }

    /// The fault this request gets, if any. Every matching rule counts the request; the first one that
    /// decides to fire wins.
    pub fn check(&mut self, method: &str, path: &str) -> Option<FaultHit> {
        self.check_with_body(method, path, None)
    }

    /// As [`FaultEngine::check`], with the request's body for rules that match it (a rule with a body
    /// pattern never matches a request checked without one).
    pub fn check_with_body(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Option<FaultHit> {
        for r in &mut self.rules {
            if r.rule
                .method
                .as_deref()
                .is_some_and(|m| !m.eq_ignore_ascii_case(method))
                || !r.re.is_match(path)
                || r.body
                    .as_ref()
                    .is_some_and(|b| !body.is_some_and(|t| b.is_match(t)))
            {
                continue;
            }
            r.seen += 1;
            if r.seen <= r.rule.skip || r.rule.count.is_some_and(|c| r.fired >= c) {
                continue;
            }
            if r.rule.probability < 1.0 && self.rng.random::<f64>() >= r.rule.probability {
                continue;
            }
            r.fired += 1;
            return Some(FaultHit {
                rule_id: r.rule.id.unwrap_or_default(),
                status: r.rule.status,
                retry_after: r.rule.retry_after,
                after_side_effect: r.rule.after_side_effect,
                build_error: r.rule.build_error,
                message: r.rule.message.clone().unwrap_or_else(|| {
                    format!("injected fault (rule {})", r.rule.id.unwrap_or_default())
                }),
            });
        }
        None
    }

    /// Token-bucket rate limit: `Some(retry_after_secs)` when the service is over its rate.
    pub fn rate_limited(&mut self, service: Service, now: SimTime) -> Option<u64> {
        let b = self.buckets.get_mut(&service)?;
        if let Some(last) = b.last {
            b.tokens = (b.tokens + (now.0 - last) * b.rate).min(b.rate.max(1.0));
        }
        b.last = Some(now.0);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            None
        } else {
            Some(((1.0 - b.tokens) / b.rate).ceil().max(1.0) as u64)
        }
    }
}

/// Token bucket in cloud time: `rate` tokens per cloud second, burst of one second's worth.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str, status: u16) -> FaultRule {
        FaultRule {
            id: None,
            method: Some("POST".into()),
            path: path.into(),
            body: None,
            status,
            probability: 1.0,
            count: Some(2),
            skip: 1,
            retry_after: Some(3),
            after_side_effect: false,
            build_error: false,
            message: None,
        }
    }

    #[test]
    fn count_skip_and_method_are_honoured() {
        let mut f = FaultEngine::new(7);
        let id = f
            .add(rule("^/compute/v2.1/servers$", 503))
            .expect("valid rule");
        assert!(
            f.check("GET", "/compute/v2.1/servers").is_none(),
            "method must match"
        );
        assert!(
            f.check("POST", "/compute/v2.1/servers").is_none(),
            "first one is skipped"
        );
        let hit = f.check("POST", "/compute/v2.1/servers").expect("fires");
        assert_eq!(
            (hit.rule_id, hit.status, hit.retry_after),
            (id, 503, Some(3))
        );
        assert!(f.check("POST", "/compute/v2.1/servers").is_some());
        assert!(
            f.check("POST", "/compute/v2.1/servers").is_none(),
            "count exhausted"
        );
    }

    #[test]
    fn probability_is_seeded_and_repeatable() {
        let run = || {
            let mut f = FaultEngine::new(42);
            let mut r = rule(".*", 500);
            r.probability = 0.5;
            r.count = None;
            r.skip = 0;
            f.add(r).expect("valid rule");
            (0..64)
                .map(|_| f.check("POST", "/x").is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let fired = a.iter().filter(|x| **x).count();
        assert!(fired > 10 && fired < 54, "{fired} of 64 fired at p=0.5");
    }

    #[test]
    fn rate_limit_refills_over_cloud_time() {
        let mut f = FaultEngine::new(0);
        f.set_rate_limit(Service::Network, Some(2.0));
        let t = SimTime(10.0);
        assert!(f.rate_limited(Service::Network, t).is_none());
        assert!(f.rate_limited(Service::Network, t).is_none());
        assert_eq!(f.rate_limited(Service::Network, t), Some(1));
        assert!(f.rate_limited(Service::Network, t.after(1.0)).is_none());
        assert!(
            f.rate_limited(Service::Compute, t).is_none(),
            "other services unaffected"
        );
        assert!(f.add(rule("(", 500)).is_err());
    }

    #[test]
    fn a_body_pattern_picks_one_create_among_many() {
        let mut f = FaultEngine::new(7);
        f.add(FaultRule {
            method: None,
            skip: 0,
            count: Some(1),
            retry_after: None,
            body: Some(r#""name": ?"kos-demo-cp-0""#.into()),
            ..rule("^/compute/v2.1/servers$", 400)
        })
        .expect("valid rule");
        assert!(f.needs_body());
        let path = "/compute/v2.1/servers";
        assert!(f.check("POST", path).is_none(), "no body, no match");
        assert!(
            f.check_with_body(
                "POST",
                path,
                Some(r#"{"server": {"name": "kos-demo-cp-1"}}"#)
            )
            .is_none()
        );
        let hit = f.check_with_body(
            "POST",
            path,
            Some(r#"{"server": {"name": "kos-demo-cp-0"}}"#),
        );
        assert_eq!(hit.map(|h| h.status), Some(400));
    }
}
