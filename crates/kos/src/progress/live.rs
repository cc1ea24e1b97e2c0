//! The bootstrap phase on a terminal: a live table, one line per node (its name, state and last
//! marker), under a line saying what is followed. [`rows`] makes the lines; indicatif only draws
//! them.

use std::collections::BTreeMap;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use kos_control::report::{Bootstrap, Event, Node, NodePhase};

/// The table's lines for `nodes`: name, state, and the last marker or the node's reason. Foreign
/// text (markers, reasons) is escaped.
pub fn rows(nodes: &BTreeMap<String, Node>) -> Vec<String> {
    nodes
        .iter()
        .map(|(id, n)| {
            let (state, what) = match n.state {
                NodePhase::Waiting => ("waiting", "no marker yet".to_owned()),
                NodePhase::Running => ("running", n.last_marker.clone().unwrap_or_default()),
                NodePhase::Done => (
                    "done",
                    format!("bootstrap {}", n.outcome.as_deref().unwrap_or("ok")),
                ),
                NodePhase::Failed => (
                    "failed",
                    format!(
                        "{} failed: {}",
                        n.failed_step.as_deref().unwrap_or("?"),
                        n.reason.as_deref().unwrap_or("")
                    ),
                ),
                NodePhase::NotFollowed => (
                    "not followed",
                    "markers scrolled out of its console".to_owned(),
                ),
            };
            format!(
                "{:<24} {state:<12} {}",
                crate::term::printable(id),
                crate::term::printable(&what)
            )
            .trim_end()
            .to_owned()
        })
        .collect()
}

/// The header's line while the consoles are followed.
pub fn header(nodes: usize, deadline_min: u64, waiting: Option<(u64, u64)>) -> String {
    // Short: it shares a terminal line with the spinner and the elapsed time.
    match waiting {
        Some((left, deadline)) => {
            format!("bootstrap of {nodes} node(s): {left} s left of {deadline} s")
        }
        None => format!("bootstrap of {nodes} node(s) (at most {deadline_min} min)"),
    }
}

/// What is drawn while a bootstrap is followed.
struct Drawn {
    multi: MultiProgress,
    header: ProgressBar,
    rows: Vec<ProgressBar>,
}

/// The live view's state: the nodes as their events left them, and the table while drawn.
#[derive(Default)]
pub struct Live {
    nodes: Bootstrap,
    followed: usize,
    deadline_min: u64,
    drawn: Option<Drawn>,
}

impl Live {
    /// Takes `event` when it belongs to the table (`true`: drawn here, not printed as a line).
    /// Any event past the consoles ends the table: cleared at `Bootstrapped` (whose plain lines
    /// say the same), otherwise left on screen as it was (a failure's last state).
    pub fn event(&mut self, event: &Event<'_>) -> bool {
        match *event {
            Event::FollowingConsoles { nodes, deadline } => {
                self.end(false);
                self.nodes = Bootstrap::default();
                self.followed = nodes;
                self.deadline_min = deadline.as_secs() / 60;
                self.start();
                true
            }
            Event::Marker { .. } | Event::Scrolled { .. } if self.drawn.is_some() => {
                self.nodes.record(event);
                self.redraw();
                true
            }
            Event::ConsolesWaiting { left, deadline, .. } => match &self.drawn {
                Some(d) => {
                    d.header.set_message(header(
                        self.followed,
                        self.deadline_min,
                        Some((left.as_secs(), deadline.as_secs())),
                    ));
                    true
                }
                None => false,
            },
            // Said while the nodes join: printed above the table.
            Event::TokenPushed
            | Event::TokenInCluster { .. }
            | Event::TokenScript { .. }
            | Event::TokenScriptFailed { .. } => false,
            Event::Bootstrapped { .. } => {
                self.end(true);
                false
            }
            _ => {
                self.end(false);
                false
            }
        }
    }

    /// Prints `f`'s output above the table while it is drawn.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.drawn {
            Some(d) => d.multi.suspend(f),
            None => f(),
        }
    }

    fn start(&mut self) {
        let multi = MultiProgress::new();
        let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let header_bar = multi.add(ProgressBar::new_spinner());
        header_bar.set_style(style);
        header_bar.set_message(header(self.followed, self.deadline_min, None));
        header_bar.enable_steady_tick(std::time::Duration::from_millis(120));
        self.drawn = Some(Drawn {
            multi,
            header: header_bar,
            rows: Vec::new(),
        });
    }

    fn redraw(&mut self) {
        let Some(d) = &mut self.drawn else { return };
        let style = ProgressStyle::with_template("  {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        for (i, line) in rows(&self.nodes.nodes).into_iter().enumerate() {
            if i == d.rows.len() {
                let bar = d.multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                d.rows.push(bar);
            }
            d.rows[i].set_message(line);
        }
    }

    /// Stops drawing: the table cleared, or left as it last was.
    fn end(&mut self, clear: bool) {
        let Some(d) = self.drawn.take() else { return };
        for bar in std::iter::once(&d.header).chain(&d.rows) {
            if clear {
                bar.finish_and_clear();
            } else {
                bar.abandon();
            }
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.end(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: NodePhase, last: Option<&str>) -> Node {
        Node {
            state,
            last_marker: last.map(str::to_owned),
            ..Node::default()
        }
    }

    #[test]
    fn one_line_per_node_in_name_order() {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "worker-0".to_owned(),
            node(NodePhase::Running, Some("containerd ok")),
        );
        nodes.insert("cp-0".to_owned(), node(NodePhase::Waiting, None));
        nodes.insert(
            "cp-1".to_owned(),
            Node {
                outcome: Some("ok".into()),
                ..node(NodePhase::Done, Some("bootstrap ok"))
            },
        );
        nodes.insert(
            "worker-1".to_owned(),
            Node {
                failed_step: Some("packages".into()),
                reason: Some("no mirror".into()),
                ..node(NodePhase::Failed, Some("packages failed: no mirror"))
            },
        );
        nodes.insert("worker-2".to_owned(), node(NodePhase::NotFollowed, None));
        assert_eq!(
            rows(&nodes),
            vec![
                format!("{:<24} {:<12} no marker yet", "cp-0", "waiting"),
                format!("{:<24} {:<12} bootstrap ok", "cp-1", "done"),
                format!("{:<24} {:<12} containerd ok", "worker-0", "running"),
                format!(
                    "{:<24} {:<12} packages failed: no mirror",
                    "worker-1", "failed"
                ),
                format!(
                    "{:<24} {:<12} markers scrolled out of its console",
                    "worker-2", "not followed"
                ),
            ]
        );
    }

    #[test]
    fn a_markers_escapes_are_shown_as_text() {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "cp-0".to_owned(),
            node(NodePhase::Running, Some("kernel ok\u{1b}[2J")),
        );
        let r = rows(&nodes);
        assert!(!r[0].contains('\u{1b}'), "{r:?}");
    }

    #[test]
    fn the_header_says_what_is_left() {
        assert_eq!(
            header(3, 30, None),
            "bootstrap of 3 node(s) (at most 30 min)"
        );
        assert_eq!(
            header(3, 30, Some((600, 1800))),
            "bootstrap of 3 node(s): 600 s left of 1800 s"
        );
    }

    #[test]
    fn the_table_takes_the_consoles_events_only_while_drawn() {
        // Never drawn here (no FollowingConsoles): every event stays a plain line.
        let mut live = Live::default();
        assert!(!live.event(&Event::Marker {
            node: "cp-0",
            marker: "kernel ok"
        }));
        assert!(!live.event(&Event::ApiReady { nodes: 1 }));
        // Drawn (to a stderr that is not a terminal here, so invisibly): the markers are its own.
        assert!(live.event(&Event::FollowingConsoles {
            nodes: 1,
            deadline: std::time::Duration::from_secs(1800),
        }));
        assert!(live.event(&Event::Marker {
            node: "cp-0",
            marker: "kernel ok"
        }));
        assert_eq!(
            rows(&live.nodes.nodes),
            vec![format!("{:<24} {:<12} kernel ok", "cp-0", "running")]
        );
        assert!(!live.event(&Event::TokenPushed));
        assert!(live.drawn.is_some());
        let nodes = BTreeMap::new();
        assert!(!live.event(&Event::Bootstrapped {
            deadline: std::time::Duration::from_secs(1800),
            nodes: &nodes,
        }));
        assert!(live.drawn.is_none());
        assert!(!live.event(&Event::Marker {
            node: "cp-0",
            marker: "bootstrap ok"
        }));
    }
}
