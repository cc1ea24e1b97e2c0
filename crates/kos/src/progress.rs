//! Progress of a run: indicatif bars on a terminal, plain lines otherwise (CI logs, pipes).

use std::io::IsTerminal;

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
        }
    }
    pb.finish_and_clear();
}

async fn lines(mut rx: mpsc::Receiver<Event>) {
    while let Some(e) = rx.recv().await {
        match e {
            Event::Phase { phase } => eprintln!("kos: phase {}", phase_name(phase)),
            Event::Started { id, kind, op } if op != Op::NoOp => {
                eprintln!("kos: {} {} {id}", verb(op), kind.as_str())
            }
            Event::Waiting { id, what } => {
                eprintln!("kos: {id}: waiting for {}", crate::term::printable(&what));
            }
            Event::Done { id, op, .. } if op != Op::NoOp => eprintln!("kos: {id}: done"),
            Event::Deleted { kind, name, .. } => eprintln!("kos: deleted {} {name}", kind.as_str()),
            Event::Failed { id, error } => {
                eprintln!("kos: {id}: failed: {}", crate::term::printable(&error));
            }
            _ => {}
        }
    }
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
