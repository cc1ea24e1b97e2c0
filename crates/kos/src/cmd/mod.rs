//! One module per subcommand, and the exit codes scripts can rely on:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done (for `plan --detailed-exitcode` and `status -f`: nothing to change) |
//! | 1 | the cloud side failed; what was done stays done, run the command again to continue |
//! | 2 | changes pending (`plan --detailed-exitcode`, `status -f` of a cluster not converged); `doctor`: a needed flow is blocked |
//! | 3 | invalid input: usage, the spec, the cloud configuration or preflight; nothing was changed; `status`: no such cluster |

mod artefacts;
mod backup;
pub mod bench;
mod bench_autoscale;
mod bench_ccm;
mod bench_csi;
mod bench_operator;
mod cluster;
mod doctor;
mod down;
mod encryption;
mod fleet;
mod gc;
mod kubeconfig;
mod rotate;
mod sim;
mod status;

use std::process::ExitCode;

use crate::cli::{BenchCommand, Cli, Command, RotateCommand, SimCommand};

/// How a successful command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Changes,
    /// `kos doctor` found a flow the cluster needs blocked.
    Blocked,
    /// `kos status` of a cluster of which nothing exists: the name is wrong (or it is gone).
    NotFound,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        match e {
            Exit::Ok => ExitCode::SUCCESS,
            Exit::Changes | Exit::Blocked => ExitCode::from(2),
            Exit::NotFound => ExitCode::from(3),
        }
    }
}

/// A diagnostic the CLI hands through a library as an error's cause, and takes back as it is.
#[derive(Debug)]
pub struct Diagnosed(pub miette::Report);

impl std::fmt::Display for Diagnosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Diagnosed {}

impl Diagnosed {
    /// The diagnostic of a cause the CLI made; any other cause as its chain.
    pub fn report(cause: kos_control::store::Cause) -> miette::Report {
        match cause.downcast::<Diagnosed>() {
            Ok(d) => d.0,
            Err(other) => miette::miette!("{}", kos_lifecycle::api::chain(&*other)),
        }
    }
}

/// A failed command: the diagnostic to show and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub report: miette::Report,
}

impl Failure {
    /// Bad input: nothing was created.
    pub fn input(report: miette::Report) -> Failure {
        Failure { code: 3, report }
    }
    pub fn cloud_report(report: miette::Report) -> Failure {
        Failure { code: 1, report }
    }
    /// A library error as the user reads it: `text`, with the library's `help` if it has one;
    /// bad input (3) when `input`, else 1.
    pub fn explained(text: &str, help: Option<&str>, input: bool) -> Failure {
        let report = match help {
            Some(help) => miette::miette!(help = help.to_owned(), "{text}"),
            None => miette::miette!("{text}"),
        };
        if input {
            Failure::input(report)
        } else {
            Failure::cloud_report(report)
        }
    }
    pub fn cloud_diagnostic(report: miette::Report) -> Failure {
        Failure::cloud_report(report)
    }
    pub fn cloud(e: kos_cloud::CloudError) -> Failure {
        Failure::cloud_report(miette::miette!("{e}"))
    }
    /// What the cluster's store could not read or keep: a record that cannot be read is input to
    /// fix (3), one that cannot be written a failure to run again (1).
    pub fn store(e: &kos_control::store::StoreError) -> Failure {
        use kos_control::store::{Record, StoreError};
        let text = kos_lifecycle::api::chain(e);
        match e {
            StoreError::Write { .. } => Failure::cloud_report(miette::miette!("{text}")),
            StoreError::Malformed {
                record: Record::Pki,
                ..
            } => Failure::input(miette::miette!(
                help = "restore the file from a backup: a new CA would not be trusted by the cluster's nodes",
                "{text}"
            )),
            StoreError::Malformed {
                record: Record::EncryptionKeys,
                ..
            } => Failure::input(miette::miette!(
                help = "restore the file from a backup: the cluster's Secrets are sealed under these keys",
                "{text}"
            )),
            _ => Failure::input(miette::miette!("{text}")),
        }
    }
    /// A cloud error before anything was changed: the cloud's failure (1) when the same command may
    /// pass later, invalid input (3) when the configuration or credentials must change.
    pub fn connect(e: &kos_cloud::CloudError) -> Failure {
        if e.is_transient() {
            Failure::cloud_report(miette::miette!(
                help = "nothing was changed: check the setting named above, or run the command again \
                        once the cloud answers",
                "{e}"
            ))
        } else {
            Failure::input(miette::miette!(
                help = "name a cloud of your clouds.yaml with --cloud (or OS_CLOUD), source an openrc \
                        file, or try `--cloud sim`",
                "{e}"
            ))
        }
    }
}

/// What `--output json` says of a failure: the message with its causes, the help, and the
/// diagnostics under it (each of a spec's problems).
pub fn failure_doc(f: &Failure) -> kos_control::report::Failure {
    let message = f
        .report
        .chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    let details = f
        .report
        .related()
        .map(|related| {
            related
                .map(|d| match d.help() {
                    Some(help) => format!("{d} (help: {help})"),
                    None => d.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    kos_control::report::Failure {
        message,
        help: f.report.help().map(|h| h.to_string()),
        details,
    }
}

/// Prints a run's summary as `--output json` does (with `r`'s failure, if any) and hands `r` on:
/// the exit code stays `r`'s, and its diagnostic still goes to stderr.
pub fn print_summary(
    mut summary: kos_control::report::Summary,
    r: Result<Exit, Failure>,
) -> Result<Exit, Failure> {
    if let Err(f) = &r {
        // Exit 3 promises nothing was changed: the input was refused.
        summary.fail(f.code == 3, failure_doc(f));
    }
    match serde_json::to_string_pretty(&summary) {
        Ok(doc) => println!("{doc}"),
        Err(e) => eprintln!("kos: cannot write the JSON summary: {e}"),
    }
    r
}

/// The failure document of a command whose `--output json` reports something else on success
/// (`kos status`, `plan`, …): the same `outcome` and `error` as a run's summary.
#[derive(serde::Serialize)]
struct FailureDoc {
    outcome: kos_control::report::Outcome,
    error: kos_control::report::Failure,
}

/// Whether the command prints JSON on stdout (`--output json`).
fn json(command: &Command) -> bool {
    use crate::cli::Output::Json;
    match command {
        Command::Plan(a) => matches!(a.output, Json),
        Command::Up(a) => matches!(a.output, Json),
        Command::Down(a) => matches!(a.output, Json),
        Command::Status(a) => matches!(a.output, Json),
        Command::Gc(a) => matches!(a.output, Json),
        Command::Doctor(a) => matches!(a.output, Json),
        Command::Artefacts(a) => matches!(a.output, Json),
        Command::Rotate {
            command: RotateCommand::Credential(a),
        } => matches!(a.output, Json),
        Command::Rotate {
            command: RotateCommand::EncryptionKey(a),
        } => matches!(a.up.output, Json),
        Command::Kubeconfig(_)
        | Command::Backup(_)
        | Command::Restore(_)
        | Command::Export(_)
        | Command::Adopt(_)
        | Command::Sim { .. }
        | Command::Bench { .. } => false,
    }
}

pub async fn run(cli: Cli) -> Result<Exit, Failure> {
    let json = json(&cli.command);
    let runs = matches!(cli.command, Command::Up(_) | Command::Rotate { .. });
    let r = command(cli).await;
    // A run prints its own summary, failed or not; another command's failure ends the same way.
    if let (true, false, Err(f)) = (json, runs, &r) {
        let doc = FailureDoc {
            outcome: if f.code == 3 {
                kos_control::report::Outcome::Refused
            } else {
                kos_control::report::Outcome::Failed
            },
            error: failure_doc(f),
        };
        if let Ok(doc) = serde_json::to_string_pretty(&doc) {
            println!("{doc}");
        }
    }
    r
}

async fn command(cli: Cli) -> Result<Exit, Failure> {
    let verbose = cli.verbose;
    match cli.command {
        Command::Plan(a) => cluster::plan(a).await,
        Command::Up(a) => cluster::up(a, verbose).await,
        Command::Down(a) => down::down(a).await,
        Command::Status(a) => status::status(a).await,
        Command::Gc(a) => gc::gc(a).await,
        Command::Doctor(a) => doctor::doctor(a).await,
        Command::Artefacts(a) => artefacts::artefacts(a).await,
        Command::Kubeconfig(a) => kubeconfig::kubeconfig(a).await,
        Command::Export(a) => fleet::export(a).await,
        Command::Adopt(a) => fleet::adopt(a).await,
        Command::Backup(a) => backup::backup(a).await,
        Command::Restore(a) => backup::restore(a).await,
        Command::Rotate {
            command: RotateCommand::Credential(a),
        } => rotate::credential(a, verbose).await,
        Command::Rotate {
            command: RotateCommand::EncryptionKey(a),
        } => encryption::rotate(a, verbose).await,
        Command::Bench {
            command: BenchCommand::Apply(args),
        } => bench::apply(args).await,
        Command::Bench {
            command: BenchCommand::Ccm(args),
        } => bench_ccm::ccm(args).await,
        Command::Bench {
            command: BenchCommand::Csi(args),
        } => bench_csi::csi(args).await,
        Command::Bench {
            command: BenchCommand::Operator(args),
        } => bench_operator::operator(args).await,
        Command::Bench {
            command: BenchCommand::Autoscale(args),
        } => bench_autoscale::autoscale(args).await,
        Command::Bench {
            command: BenchCommand::CcmController,
        } => bench_ccm::controller().await,
        Command::Sim {
            command: SimCommand::Serve(args),
        } => sim::serve(args)
            .await
            .map(|()| Exit::Ok)
            .map_err(Failure::input),
    }
}
