//! Progress of a run: indicatif bars on a terminal, plain lines otherwise (CI logs, pipes).

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use kos_cluster::events::{Event, Phase};
use kos_cluster::plan::Op;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Renders events until the sender side is dropped; `total` is the number of changes planned.
pub fn spawn(total: u64) -> (mpsc::Sender<Event>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(1024);
    let handle = if std::io::stderr().is_terminal() {
        tokio::spawn(bar(rx, total))
    } else {
        tokio::spawn(lines(rx))
    };
    (tx, handle)
}

async fn bar(mut rx: mpsc::Receiver<Event>, total: u64) {
    let pb = ProgressBar::new(total.max(1));
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    while let Some(e) = rx.recv().await {
        match e {
            Event::Phase { phase } => pb.set_message(phase_name(phase)),
            Event::Started { id, op, .. } => pb.set_message(format!("{} {id}", verb(op))),
            Event::Waiting { id, what } => pb.set_message(format!("{id}: waiting for {what}")),
            Event::Done { op, .. } if op != Op::NoOp => pb.inc(1),
            Event::Done { .. } => {}
            Event::Deleted { kind, name, .. } => {
                pb.inc(1);
                pb.set_message(format!("deleted {} {name}", kind.as_str()));
            }
            Event::Failed { id, error } => {
                pb.println(format!("✗ {id}: {}", crate::term::printable(&error)));
            }
            // Its `Failed` follows.
            Event::BuildFailed { .. } => {}
        }
    }
    pb.finish_and_clear();
}

/// How long the plain output may stay silent: then it says what the run still waits for.
pub use kos_control::report::HEARTBEAT;

/// kos-control's reports as `kos: …` lines on stderr, and the bootstrap's and API's outcome as
/// lines on stdout. Text from a node's console or the cluster is escaped: nothing foreign reaches
/// the terminal as it is.
pub struct Lines;

impl kos_control::report::Report for Lines {
    fn apply_progress(&self, total: u64) -> (mpsc::Sender<Event>, JoinHandle<()>) {
        spawn(total)
    }

    fn event(&self, event: kos_control::report::Event<'_>) {
        for (stream, line) in render(event) {
            stream.print(&line);
        }
    }
}

mod live;

/// The report of a run that a person follows (`kos up`, `kos rotate`): [`Lines`], except that on a
/// terminal (without `-v` or `RUST_LOG`, whose log lines would tear it) the bootstrap phase is a
/// live table, and that with `--output json` the outcome lines go to stderr too: stdout then
/// carries only the run's JSON document.
pub struct Progress {
    json: bool,
    live: Option<Mutex<live::Live>>,
}

impl Progress {
    /// Ends a run's output: the live table first, then, with `--output json`, the document of
    /// `summary` and `r`'s failure; `r` is handed on (its exit code, its diagnostic on stderr).
    pub fn finish(
        self,
        summary: kos_control::report::Summary,
        r: Result<crate::cmd::Exit, crate::cmd::Failure>,
    ) -> Result<crate::cmd::Exit, crate::cmd::Failure> {
        let json = self.json;
        drop(self);
        if json {
            crate::cmd::print_summary(summary, r)
        } else {
            r
        }
    }

    /// `json`: stdout is for the JSON document; `verbose`: `-v`'s count.
    pub fn new(json: bool, verbose: u8) -> Progress {
        let live = std::io::stderr().is_terminal()
            && verbose == 0
            && std::env::var_os("RUST_LOG").is_none();
        Progress {
            json,
            live: live.then(|| Mutex::new(live::Live::default())),
        }
    }
}

impl kos_control::report::Report for Progress {
    fn apply_progress(&self, total: u64) -> (mpsc::Sender<Event>, JoinHandle<()>) {
        spawn(total)
    }

    fn event(&self, event: kos_control::report::Event<'_>) {
        let print = |lines: Vec<(Stream, String)>| {
            for (stream, line) in lines {
                if self.json { Stream::Err } else { stream }.print(&line);
            }
        };
        let Some(live) = &self.live else {
            print(render(event));
            return;
        };
        let mut live = live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !live.event(&event) {
            live.suspend(|| print(render(event)));
        }
    }
}

/// Where a line of [`render`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// An outcome (`Cluster demo is up`, the bootstrap's table): stdout.
    Out,
    /// Progress and warnings: stderr.
    Err,
}

impl Stream {
    fn print(self, line: &str) {
        match self {
            Stream::Out => println!("{line}"),
            Stream::Err => eprintln!("{line}"),
        }
    }
}

/// The lines [`Lines`] prints for `event`, each with its stream.
pub fn render(event: kos_control::report::Event<'_>) -> Vec<(Stream, String)> {
    use kos_control::report::Event as E;
    let mut out = Vec::new();
    macro_rules! e {
        ($($t:tt)*) => { out.push((Stream::Err, format!($($t)*))) };
    }
    macro_rules! o {
        ($($t:tt)*) => { out.push((Stream::Out, format!($($t)*))) };
    }
    match event {
        E::Marker { node, marker } => {
            e!("kos: {node}: {}", crate::term::printable(marker));
        }
        E::Scrolled { node, kib } => e!(
            "kos: {node}: no bootstrap marker in the last {kib} KiB of its console (created by an earlier \
             run, its markers scrolled out): not followed"
        ),
        E::ConsolesWaiting {
            waiting,
            left,
            deadline,
        } => e!(
            "kos: bootstrap: waiting for {} ({} s left of {} s)",
            waiting.join(", "),
            left.as_secs(),
            deadline.as_secs()
        ),
        E::Nodes { summary } => e!("kos: kubernetes: {summary}"),
        E::NodesWaiting {
            expected,
            last,
            left,
            deadline,
        } => e!(
            "kos: kubernetes: waiting for {expected} Ready node(s): {last} ({} s left of {} s)",
            left.as_secs(),
            deadline.as_secs()
        ),
        E::TokenPushed => {
            e!("kos: the join token is in the cluster for the new node(s)")
        }
        E::PreflightWarnings { warnings } => e!(
            "{}",
            crate::term::report(&miette::Report::new(warnings.clone()))
        ),
        E::KeysStep { cluster, shown } => e!("kos: {cluster}: {shown}"),
        E::SecretsRewritten { cluster, secrets } => {
            e!("kos: {cluster}: {secrets} Secret(s) written again under the new key");
        }
        E::NotDrained { nodes, why } => e!(
            "kos: warning: cannot drain {nodes} before removing them ({why}): their pods go with their servers"
        ),
        E::NodeKept { node, why } => e!(
            "kos: warning: the Node {node} of a removed server stays ({why}); the cloud controller removes it"
        ),
        E::AddonMoved {
            cluster,
            addon,
            minor,
        } => e!("kos: {cluster}: {addon} moved to the images of Kubernetes 1.{minor}"),
        E::AddonsNotMoved { why } => e!(
            "kos: warning: the cloud controller and CSI could not be moved to this minor's release: {why}"
        ),
        E::Rotation { line } => e!("kos: {}", crate::term::escape(line)),
        E::RotationDue {
            cluster,
            credential,
            why,
        } => e!(
            "kos: {cluster}: the CCM application credential {} {why}: rotating it",
            crate::term::printable(credential)
        ),
        E::Changes { cluster, changes } => {
            e!("kos: {cluster}: {changes} change(s) to make");
        }
        E::Formation { cluster, reason } => e!("kos: {cluster}: {reason}"),
        E::MembersNotChecked {
            cluster,
            why,
            kubeadm_ran: false,
        } => e!(
            "kos: {cluster}: the etcd members were not checked ({why}): no running control plane \
             has run kubeadm yet, so none of an earlier life can be registered"
        ),
        E::MembersNotChecked {
            why,
            kubeadm_ran: true,
            ..
        } => e!(
            "kos: warning: cannot check the etcd members before new control planes \
             join ({why})"
        ),
        E::Applied {
            cluster,
            changes,
            api_address,
        } => {
            o!("Cluster {cluster} is up: {changes} change(s) made.");
            if let Some(a) = api_address {
                o!("API endpoint: https://{a}:6443");
            }
        }
        E::TokenInCluster { certs, renewed } => e!(
            "kos: the join token{} in the cluster before the new node(s) boot{}",
            if certs {
                " and the control planes' certificates (kubeadm-certs, 2 h) are"
            } else {
                " is"
            },
            if renewed { " (renewed)" } else { "" }
        ),
        E::TokenScript { why, location } => e!(
            "kos: warning: the join token cannot be put into the cluster: its API cannot be reached \
             from here ({why}): nodes created now can join once it exists. Run {location} (0600, it holds \
             the token) on a control plane: `sudo sh create-bootstrap-token.sh`"
        ),
        E::TokenScriptFailed { why, error } => e!(
            "kos: warning: the join token was not created in the cluster ({why}), and its script \
             could not be written: {error}"
        ),
        E::BootstrapNotFollowed => o!("Bootstrap: not followed (--wait infra)"),
        E::FollowingConsoles { nodes, deadline } => e!(
            "kos: phase bootstrap: following {nodes} node(s) on their consoles (for at most {} min of the cloud's time)",
            deadline.as_secs() / 60
        ),
        E::FailedEarlier { why } => e!("kos: bootstrap: {why}"),
        E::Bootstrapped { deadline, nodes } => {
            use kos_control::follow::NodeState;
            o!(
                "Bootstrap (deadline {} s on this machine's clock):",
                deadline.as_secs()
            );
            for (id, state) in nodes {
                let shown = match state {
                    NodeState::Done(outcome) => format!("bootstrap {outcome}"),
                    NodeState::Running(last) => format!("last step: {last}"),
                    NodeState::Waiting => "markers scrolled out of its console".into(),
                    NodeState::Failed { step, reason } => format!("{step} failed: {reason}"),
                };
                o!("  {id:<24} {shown}");
            }
        }
        E::ApiNotChecked => o!("Kubernetes API: not checked (--wait bootstrap)"),
        // The error that stopped it follows; its changes count in --output json.
        E::ApplyStopped { .. } => {}
        E::ApiSkipped { why } => o!("Kubernetes API: skipped ({why})"),
        E::ApiWaiting { nodes } => {
            e!("kos: phase kubernetes: waiting for /readyz and {nodes} Ready node(s)")
        }
        E::ApiReady { nodes } => {
            o!("Kubernetes API: ready; {nodes} node(s) Ready and initialised");
        }
        E::CertsKept { why } => e!(
            "kos: warning: kubeadm-certs could not be deleted from the cluster ({why}); \
             it goes with its two-hour token"
        ),
        E::TokenDeleted => {
            e!("kos: every node joined: the join token is deleted from the cluster");
        }
        E::TokenKept { why } => e!(
            "kos: warning: the join token could not be deleted from the cluster ({why}); it expires on its own"
        ),
        E::Leaving {
            cluster,
            node,
            scale_down,
            changes,
        } => e!(
            "kos: {cluster}: {} {node} ({})",
            if scale_down { "removing" } else { "replacing" },
            crate::term::escape(changes)
        ),
        E::RepairHeld {
            cluster,
            group,
            why,
        } => e!("kos: {cluster}: not repairing {group}: {why}"),
        // Only what is wrong: a healthy cluster's every turn would say nothing new.
        E::Health { cluster, groups } => {
            for g in groups {
                for (node, found) in &g.unhealthy {
                    e!(
                        "kos: {cluster}: {node} ({}) is unhealthy: {}",
                        g.group,
                        crate::term::escape(found)
                    );
                }
            }
        }
        E::HealthRecheck { cluster, secs } => e!(
            "kos: {cluster}: a node is not healthy but inside its health check's timeout: \
             unhealthy in {secs}s at the earliest (the cloud's clock)"
        ),
        E::Drain { node, line } => e!("kos: {node}: {}", crate::term::escape(line)),
        E::Drained { node, evicted } => {
            e!("kos: {node}: drained ({evicted} pod(s) evicted)");
        }
        E::ConfigMoved {
            cluster,
            version,
            encryption,
            sans,
        } => {
            if let Some(v) = version {
                e!("kos: {cluster}: kubeadm-config says Kubernetes {v}");
            }
            if encryption {
                e!(
                    "kos: {cluster}: kubeadm-config gives kube-apiserver its encryption configuration"
                );
            }
            if let Some(sans) = sans {
                e!(
                    "kos: {cluster}: kubeadm-config names the API {}",
                    sans.join(", ")
                );
            }
        }
        E::Member { line } => e!("kos: {}", crate::term::escape(line)),
        E::CcmCredentialStored { location } => {
            e!("kos: the CCM's application credential is stored in {location} (0600)");
        }
        E::CcmSecretLost {
            cluster,
            location,
            in_use: true,
        } => e!(
            "kos: warning: the CCM application credential's secret is not stored on this machine ({location}); \
             a re-created first control plane cannot get its cloud.conf. `kos rotate credential {cluster}` \
             replaces it (in the running cluster too) and stores the new one here"
        ),
        E::CcmSecretLost {
            location,
            in_use: false,
            ..
        } => e!(
            "kos: the CCM application credential's secret is not stored on this machine ({location}) and no server \
             uses it yet (an earlier run stopped before storing it): replacing it"
        ),
    }
    out
}

async fn lines(mut rx: mpsc::Receiver<Event>) {
    // What is in progress, and what each waits for: the heartbeat names it.
    let mut busy: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    let started = tokio::time::Instant::now();
    let mut last = started;
    let mut tick = tokio::time::interval(HEARTBEAT / 3);
    loop {
        let e = tokio::select! {
            e = rx.recv() => match e {
                Some(e) => e,
                None => return,
            },
            _ = tick.tick() => {
                if last.elapsed() >= HEARTBEAT {
                    eprintln!("kos: {}", still(&busy, started.elapsed()));
                    last = tokio::time::Instant::now();
                }
                continue;
            }
        };
        last = tokio::time::Instant::now();
        match e {
            Event::Phase { phase } => eprintln!("kos: phase {}", phase_name(phase)),
            Event::Started { id, kind, op } if op != Op::NoOp => {
                eprintln!("kos: {} {} {id}", verb(op), kind.as_str());
                busy.insert(id, format!("{} {}", verb(op), kind.as_str()));
            }
            Event::Waiting { id, what } => {
                let what = crate::term::printable(&what).into_owned();
                eprintln!("kos: {id}: waiting for {what}");
                busy.insert(id, format!("waiting for {what}"));
            }
            Event::Done { id, op, .. } if op != Op::NoOp => {
                eprintln!("kos: {id}: done");
                busy.remove(&id);
            }
            Event::Deleted { id, kind, name } => {
                eprintln!("kos: deleted {} {name}", kind.as_str());
                busy.remove(&id);
            }
            Event::Failed { id, error } => {
                eprintln!("kos: {id}: failed: {}", crate::term::printable(&error));
                busy.remove(&id);
            }
            _ => {}
        }
    }
}

/// The heartbeat's line: what is still in progress, after how long.
fn still(
    busy: &std::collections::BTreeMap<String, String>,
    elapsed: std::time::Duration,
) -> String {
    let what = if busy.is_empty() {
        "the cloud's answers".to_owned()
    } else {
        busy.iter()
            .map(|(id, what)| format!("{id} ({what})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("still working after {} s: {what}", elapsed.as_secs())
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Converge => "converge",
        Phase::Prune => "prune",
        Phase::Teardown => "teardown",
        Phase::Done => "done",
    }
}

fn verb(op: Op) -> &'static str {
    match op {
        Op::Create => "creating",
        Op::Update => "updating",
        Op::Adopt => "adopting",
        Op::Replace | Op::Roll => "replacing",
        Op::Delete => "deleting",
        Op::NoOp => "checking",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use kos_control::follow::NodeState;
    use kos_control::report::Event as E;

    use super::{Stream, render};

    #[test]
    fn outcomes_go_to_stdout_and_progress_to_stderr() {
        assert_eq!(
            render(E::Applied {
                cluster: "demo",
                changes: 3,
                api_address: Some("192.0.2.1"),
            }),
            vec![
                (
                    Stream::Out,
                    "Cluster demo is up: 3 change(s) made.".to_owned()
                ),
                (
                    Stream::Out,
                    "API endpoint: https://192.0.2.1:6443".to_owned()
                ),
            ]
        );
        let mut nodes = BTreeMap::new();
        nodes.insert("cp-0".to_owned(), NodeState::Done("ok".into()));
        nodes.insert(
            "workers-0".to_owned(),
            NodeState::Running("kernel ok".into()),
        );
        assert_eq!(
            render(E::Bootstrapped {
                deadline: Duration::from_secs(120),
                nodes: &nodes,
            }),
            vec![
                (
                    Stream::Out,
                    "Bootstrap (deadline 120 s on this machine's clock):".to_owned()
                ),
                (Stream::Out, format!("  {:<24} bootstrap ok", "cp-0")),
                (
                    Stream::Out,
                    format!("  {:<24} last step: kernel ok", "workers-0")
                ),
            ]
        );
        // A marker is the guest's text: escaped, on stderr.
        assert_eq!(
            render(E::Marker {
                node: "cp-0",
                marker: "kernel ok\u{1b}[2J",
            }),
            vec![(Stream::Err, "kos: cp-0: kernel ok\\u{1b}[2J".to_owned())]
        );
    }
}
