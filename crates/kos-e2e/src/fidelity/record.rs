//! Recording: each step of the sequence becomes one normalised [`Observation`].

use std::collections::{BTreeMap, BTreeSet};

use kos_cloud::{ApiRequest, CloudError, RetryPolicy, Session};
use serde_json::Value;
use tokio::time::Instant;

use crate::{Ctx, WAIT};

/// What one call showed, with everything run-specific (ids, times, addresses) left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The HTTP status, success or error.
    pub status: Option<u16>,
    /// The error's kind (`Conflict`, `OverQuota`, … or the `CloudError` variant for non-HTTP errors).
    pub error: Option<String>,
    /// Top-level keys of the resource (or the union over a list's items).
    pub keys: BTreeSet<String>,
    /// States seen while polling, consecutive repeats collapsed; `<gone>` when it 404s.
    pub states: Vec<String>,
    /// How many items a list returned.
    pub count: Option<usize>,
    /// Chosen field values (JSON), e.g. a port's `tags` right after create.
    pub values: BTreeMap<String, String>,
}

impl Observation {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// One target's run of the sequence, in order.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub target: String,
    pub steps: Vec<(String, Observation)>,
}

impl Recording {
    pub fn get(&self, step: &str) -> Option<&Observation> {
        self.steps.iter().find(|(s, _)| s == step).map(|(_, o)| o)
    }
}

/// One line per step: what a reader of a CI log needs to see the real cloud's behaviour.
impl std::fmt::Display for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} ({} steps):", self.target, self.steps.len())?;
        for (step, o) in &self.steps {
            write!(f, "  {step:<42}")?;
            if let Some(s) = o.status {
                write!(f, " {s}")?;
            }
            if let Some(e) = &o.error {
                write!(f, " {e}")?;
            }
            if !o.states.is_empty() {
                write!(f, " {}", o.states.join(" -> "))?;
            }
            if let Some(c) = o.count {
                write!(f, " count={c}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The kind of an error as the comparison sees it.
pub fn error_kind(e: &CloudError) -> String {
    match e {
        CloudError::Api { kind, .. } => format!("{kind:?}"),
        CloudError::Ambiguous { .. } => "Ambiguous".into(),
        CloudError::Transport { .. } => "Transport".into(),
        CloudError::Decode { .. } => "Decode".into(),
        CloudError::Config(_) => "Config".into(),
        CloudError::Auth(_) => "Auth".into(),
        CloudError::Lookup { .. } => "Lookup".into(),
        CloudError::Invalid { .. } => "Invalid".into(),
        CloudError::Failed { .. } => "Failed".into(),
        CloudError::Timeout { .. } => "Timeout".into(),
        CloudError::CreatedUntagged { source, .. } => error_kind(source),
    }
}

/// Records calls made through one context.
pub struct Recorder<'a> {
    pub ctx: &'a Ctx,
    pub rec: Recording,
    /// The context's session without retries: the check compares what the cloud answers, not what
    /// kos-cloud's retry policy makes of it (it retries Octavia's "immutable" 409, for one).
    session: Session,
}

impl<'a> Recorder<'a> {
    pub fn new(ctx: &'a Ctx, target: impl Into<String>) -> Self {
        Recorder {
            ctx,
            session: ctx.session.clone().with_retry_policy(RetryPolicy::none()),
            rec: Recording {
                target: target.into(),
                steps: Vec::new(),
            },
        }
    }

    fn push(&mut self, step: &str, o: Observation) {
        tracing::debug!(target = %self.rec.target, step, ?o, "fidelity step");
        self.rec.steps.push((step.to_owned(), o));
    }

    /// Records the outcome of a call made some other way (a facade, a connect).
    pub fn outcome<T>(&mut self, step: &str, r: &Result<T, CloudError>) {
        let o = match r {
            Ok(_) => Observation::default(),
            Err(e) => Observation {
                status: e.status(),
                error: Some(error_kind(e)),
                ..Default::default()
            },
        };
        self.push(step, o);
    }

    /// Sends `req`; records status, error kind, the key set of `body[wrapper]` (or of the body) and
    /// the values of `fields`. Returns that object on success.
    pub async fn call(
        &mut self,
        step: &str,
        req: ApiRequest,
        wrapper: Option<&str>,
        fields: &[&str],
    ) -> Option<Value> {
        match self.session.send(req).await {
            Ok(resp) => {
                let body: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
                let obj = match wrapper {
                    Some(w) => body.get(w).cloned().unwrap_or(Value::Null),
                    None => body,
                };
                self.push(
                    step,
                    Observation {
                        status: Some(resp.status),
                        keys: keys(&obj),
                        values: pick(&obj, fields, &self.ctx.run.prefix),
                        ..Default::default()
                    },
                );
                Some(obj)
            }
            Err(e) => {
                self.outcome::<()>(step, &Err(e));
                None
            }
        }
    }

    /// Sends a list request; records status, the number of items and the union of their keys.
    pub async fn list(&mut self, step: &str, req: ApiRequest, collection: &str) -> Vec<Value> {
        match self.session.send(req).await {
            Ok(resp) => {
                let body: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
                let items = body
                    .get(collection)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                self.push(
                    step,
                    Observation {
                        status: Some(resp.status),
                        keys: items.iter().flat_map(keys).collect(),
                        count: Some(items.len()),
                        ..Default::default()
                    },
                );
                items
            }
            Err(e) => {
                self.outcome::<()>(step, &Err(e));
                Vec::new()
            }
        }
    }

    /// Polls `req` until `body[wrapper][field]` is one of `done`, the object is gone (404), or
    /// `t.patience` passes; records the collapsed sequence, starting with `t.first` (the state the
    /// create answered with) when given. With `t.only_final`, records just the last state (for
    /// transitions whose intermediate states a poll may or may not catch on either side).
    pub async fn track(&mut self, step: &str, req: &ApiRequest, t: Track<'_>) -> String {
        let (wrapper, field, done) = (t.wrapper, t.field, t.done);
        let mut states: Vec<String> = t.first.map(str::to_owned).into_iter().collect();
        let end = Instant::now() + t.patience;
        let last = loop {
            let state = match self.session.send(req.clone()).await {
                Ok(resp) => serde_json::from_slice::<Value>(&resp.body)
                    .ok()
                    .and_then(|b| b.get(wrapper)?.get(field)?.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "<missing>".into()),
                Err(e) if e.is_not_found() => "<gone>".into(),
                Err(e) => format!("<error {}>", error_kind(&e)),
            };
            if states.last() != Some(&state) {
                states.push(state.clone());
            }
            let finished = done.contains(&state.as_str()) || state.starts_with('<');
            if finished || Instant::now() >= end {
                break state;
            }
            tokio::time::sleep(self.ctx.every).await;
        };
        if t.only_final {
            states = vec![last.clone()];
        }
        self.push(
            step,
            Observation {
                states,
                ..Default::default()
            },
        );
        last
    }
}

/// How [`Recorder::track`] polls one status field.
#[derive(Debug, Clone, Copy)]
pub struct Track<'a> {
    /// The response's wrapper key (`server`, `loadbalancer`, …).
    pub wrapper: &'a str,
    pub field: &'a str,
    pub first: Option<&'a str>,
    /// States that end the wait (a 404 always does).
    pub done: &'a [&'a str],
    pub only_final: bool,
    pub patience: std::time::Duration,
}

impl<'a> Track<'a> {
    /// Until one of `done` or gone, recording the whole collapsed sequence, for at most [`WAIT`].
    pub fn new(wrapper: &'a str, field: &'a str, done: &'a [&'a str]) -> Self {
        Track {
            wrapper,
            field,
            first: None,
            done,
            only_final: false,
            patience: WAIT,
        }
    }

    pub fn first(self, state: Option<&'a str>) -> Self {
        Track {
            first: state,
            ..self
        }
    }

    pub fn only_final(self) -> Self {
        Track {
            only_final: true,
            ..self
        }
    }

    pub fn patience(self, d: std::time::Duration) -> Self {
        Track {
            patience: d,
            ..self
        }
    }
}

/// The object's keys (none for non-objects).
fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The values of `fields`, as JSON, with the run's prefix replaced by `<run>`.
fn pick(v: &Value, fields: &[&str], prefix: &str) -> BTreeMap<String, String> {
    fields
        .iter()
        .map(|f| {
            let val = v.get(*f).map_or("<absent>".to_owned(), |v| {
                v.to_string().replace(prefix, "<run>")
            });
            ((*f).to_owned(), val)
        })
        .collect()
}
