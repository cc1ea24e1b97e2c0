//! One module per subcommand, and the exit codes scripts can rely on:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done (for `plan --detailed-exitcode` and `status -f`: nothing to change) |
//! | 1 | the cloud side failed; what was done stays done, run the command again to continue |
//! | 2 | changes pending (`plan --detailed-exitcode`, `status -f` of a cluster not converged); `doctor`: a needed flow is blocked |
//! | 3 | invalid input: usage, the spec, the cloud configuration or preflight; nothing was changed; `status`: no such cluster |

mod artefacts;
pub mod bench;
mod bench_ccm;
mod bench_csi;
mod cluster;
mod doctor;
mod encryption;
mod kubeconfig;
mod rotate;
mod sim;

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

pub async fn run(cli: Cli) -> Result<Exit, Failure> {
    match cli.command {
        Command::Plan(a) => cluster::plan(a).await,
        Command::Up(a) => cluster::up(a).await,
        Command::Down(a) => cluster::down(a).await,
        Command::Status(a) => cluster::status(a).await,
        Command::Gc(a) => cluster::gc(a).await,
        Command::Doctor(a) => doctor::doctor(a).await,
        Command::Artefacts(a) => artefacts::artefacts(a).await,
        Command::Kubeconfig(a) => kubeconfig::kubeconfig(a).await,
        Command::Rotate {
            command: RotateCommand::Credential(a),
        } => rotate::credential(a).await,
        Command::Rotate {
            command: RotateCommand::EncryptionKey(a),
        } => encryption::rotate(a).await,
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
