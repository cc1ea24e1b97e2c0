//! The `kos-ccm` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kos_ccm::check::{Format, check_config};

#[derive(Parser)]
#[command(
    name = "kos-ccm",
    version,
    about = "OpenStack cloud-controller-manager"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a cloud.conf and print the effective configuration (secrets redacted).
    CheckConfig {
        /// The cloud.conf, as given to the upstream CCM.
        #[arg(long)]
        cloud_config: PathBuf,
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::CheckConfig {
            cloud_config,
            format,
        } => {
            let out = check_config(&cloud_config, format, &kos_cloud::Env::process());
            print!("{}", out.stdout);
            eprint!("{}", out.stderr);
            if out.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
