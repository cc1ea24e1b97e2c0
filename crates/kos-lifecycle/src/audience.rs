//! Who a failure's help speaks to: the person at the CLI, who runs `kos up` again, or kos-operator,
//! which runs the Cluster's turn again by itself. Help texts that tell what to do next say it to the
//! one who does it.

/// Who a run's help is worded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Audience {
    /// `kos up` at a terminal: the user runs it again.
    #[default]
    Cli,
    /// kos-operator: it retries the Cluster's turn by itself; the user fixes causes and edits the
    /// Cluster.
    Operator,
}

impl Audience {
    /// How the run comes again after the user fixed the cause: "run `kos up` again", or the
    /// operator's own retry.
    #[must_use]
    pub fn again(self) -> &'static str {
        match self {
            Audience::Cli => "run `kos up` again",
            Audience::Operator => "the operator tries again by itself",
        }
    }

    /// Where the user reads what a run would change: `kos plan`, or the Cluster's status and Events.
    #[must_use]
    pub fn plan(self) -> &'static str {
        match self {
            Audience::Cli => "`kos plan`",
            Audience::Operator => "the Cluster's status and Events",
        }
    }
}
