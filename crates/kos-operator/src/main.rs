//! The `kos-operator` binary: `kos-operator crd` prints the CustomResourceDefinition.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kos-operator",
    version,
    about = "kos as a Kubernetes controller for clusters.kos.dev resources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the clusters.kos.dev CustomResourceDefinition (YAML).
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match kos_operator::resource::crd_yaml() {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kos-operator: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
