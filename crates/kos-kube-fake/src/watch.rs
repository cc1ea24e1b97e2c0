//! Streaming watches: newline-delimited JSON `WatchEvent`s over a chunked response, as the real
//! API server sends them.
//!
//! A watch replays the change history after its resourceVersion, then follows new changes; with no
//! resourceVersion (or `0`, or `sendInitialEvents=true`) it first sends every current object as
//! ADDED. A resourceVersion older than the kept history ends the stream with an ERROR event
//! carrying a 410 `Status` (clients relist). With `allowWatchBookmarks=true` it sends a BOOKMARK
//! every [`crate::Config::bookmark_interval`], and after the initial events of a streaming list.
//! A selector turns a modification into ADDED or DELETED when the object starts or stops matching.
//! The stream ends after `timeoutSeconds` and when the fake stops. Asked for as a `Table`
//! (`kubectl get -w`), each event's object is a one-row table, the first with the column
//! definitions and the others without, as the apiserver's watch encoder sends them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{ApiError, ApiResult};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{Form, Shared, partial_metadata};
use crate::store::{Change, ChangeKind};
use crate::table;

/// What a watch request asked for.
#[derive(Debug, Clone)]
pub(crate) struct WatchParams {
    pub res: usize,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `None` for "" and "0": start with the current state.
    pub since: Option<u64>,
    pub send_initial: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub form: Form,
}

struct State {
    shared: Arc<Shared>,
    p: WatchParams,
    cursor: u64,
    pending: VecDeque<Bytes>,
    changed: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    deadline: Instant,
    next_bookmark: Instant,
    done: bool,
    /// A table watch has sent its column definitions.
    sent_headers: bool,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

impl State {
    fn event(&mut self, kind: &str, object: &Value) -> Bytes {
        match self.p.form {
            Form::Object => line(kind, object),
            Form::Metadata => line(kind, &partial_metadata(object)),
            Form::Table(include) => {
                let rt = self.shared.store().types[self.p.res].clone();
                let meta = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                let t = table::table(
                    &rt,
                    std::slice::from_ref(object),
                    meta,
                    !self.sent_headers,
                    include,
                );
                self.sent_headers = true;
                line(kind, &t)
            }
        }
    }

    fn matches(&self, obj: &Value) -> bool {
        self.p.labels.matches(obj) && self.p.fields.matches(obj)
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let store = self.shared.store();
        let rt = &store.types[self.p.res];
        let mut meta = json!({"resourceVersion": self.cursor.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta}),
        )
    }

    fn translate(&mut self, c: &Change) -> Option<Bytes> {
        if self.p.ns.as_ref().is_some_and(|ns| *ns != c.ns) {
            return None;
        }
        let now = self.matches(&c.object);
        match c.kind {
            ChangeKind::Added => now.then(|| self.event("ADDED", &c.object)),
            ChangeKind::Deleted => now.then(|| self.event("DELETED", &c.object)),
            ChangeKind::Modified => {
                let before = c.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some(self.event("MODIFIED", &c.object)),
                    (false, true) => Some(self.event("ADDED", &c.object)),
                    (true, false) => Some(self.event("DELETED", &c.object)),
                    (false, false) => None,
                }
            }
        }
    }

    /// Queues what happened since the cursor, or the 410 ERROR when the history no longer
    /// reaches back to it.
    fn catch_up(&mut self) {
        let result = {
            let store = self.shared.store();
            store
                .changes_since(self.p.res, self.cursor)
                .map(|changes| (changes, store.resource_version()))
        };
        match result {
            Ok((changes, rv)) => {
                for c in &changes {
                    if let Some(b) = self.translate(c) {
                        self.pending.push_back(b);
                    }
                }
                self.cursor = rv;
            }
            Err(e) => {
                self.pending.push_back(line("ERROR", &e.status()));
                self.done = true;
            }
        }
    }

    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, State)> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some((Ok(b), self));
            }
            if self.done {
                return None;
            }
            self.catch_up();
            if !self.pending.is_empty() || self.done {
                continue;
            }
            let bookmark_at = self.next_bookmark;
            tokio::select! {
                r = self.changed.changed() => {
                    if r.is_err() {
                        self.done = true;
                    }
                }
                r = self.stopping.changed() => {
                    if r.is_err() || *self.stopping.borrow() {
                        self.done = true;
                    }
                }
                () = tokio::time::sleep_until(self.deadline) => self.done = true,
                () = tokio::time::sleep_until(bookmark_at), if self.p.bookmarks => {
                    let b = self.bookmark(false);
                    self.pending.push_back(b);
                    self.next_bookmark = Instant::now() + self.shared.config.bookmark_interval;
                }
            }
        }
    }
}

/// Starts a watch: the initial events are taken under the same lock as the starting cursor, so
/// nothing falls between them.
pub(crate) fn start(
    shared: Arc<Shared>,
    p: WatchParams,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let initial = p.since.is_none() || p.send_initial;
    let (objects, cursor) = {
        let store = shared.store();
        let rv = store.resource_version();
        if initial {
            let objs = store.list(p.res, p.ns.as_deref(), &p.labels, &p.fields);
            (objs, rv)
        } else {
            let since = p.since.unwrap_or(rv);
            (Vec::new(), since)
        }
    };
    let now = Instant::now();
    let mut state = State {
        changed: shared.changed.subscribe(),
        stopping: shared.stopping.subscribe(),
        deadline: now + p.timeout,
        next_bookmark: now + shared.config.bookmark_interval,
        shared,
        p,
        cursor,
        pending: VecDeque::new(),
        done: false,
        sent_headers: false,
    };
    for o in &objects {
        let b = state.event("ADDED", o);
        state.pending.push_back(b);
    }
    if state.p.send_initial && state.p.bookmarks {
        let b = state.bookmark(true);
        state.pending.push_back(b);
    }
    if !initial {
        // A too-old start is reported in the stream, as the real server does (200, then ERROR).
        let check = state.shared.store().changes_since(state.p.res, cursor);
        if let Err(e) = check {
            state.pending.push_back(line("ERROR", &e.status()));
            state.done = true;
        }
    }
    futures::stream::unfold(state, State::next)
}

/// `timeoutSeconds`, defaulting like the apiserver's `--min-request-timeout` (1800 s).
pub(crate) fn timeout(q: Option<&str>) -> ApiResult<Duration> {
    match q {
        None | Some("") => Ok(Duration::from_secs(1800)),
        Some(s) => s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))),
    }
}
