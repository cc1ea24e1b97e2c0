//! Command-line interface definition.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kos",
    version,
    about = "Kubernetes on OpenStack",
    propagate_version = true
)]
pub struct Cli {
    /// More log output (-v, -vv). RUST_LOG overrides. The SDK logs every URL at info, so it stays at
    /// warn below -vv.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The simulated OpenStack cloud (for demos, tests and benchmarks).
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Serve a simulated OpenStack cloud on 127.0.0.1 and write a clouds.yaml for it.
    Serve(SimServeArgs),
}

#[derive(Debug, Args)]
pub struct SimServeArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Simulator config (YAML: time_scale, latency, faults, rate_limits, quotas, ...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where to write the clouds.yaml (cloud name `sim`).
    #[arg(long, value_name = "PATH", default_value = "clouds.yaml")]
    pub clouds_yaml: PathBuf,
    /// Real seconds per simulated second (overrides the config file; 1 = real time).
    #[arg(long)]
    pub time_scale: Option<f64>,
}
