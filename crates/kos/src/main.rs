//! `kos`: Kubernetes on OpenStack.

mod cli;
mod cmd;

use clap::Parser;

fn main() -> miette::Result<()> {
    let cli = cli::Cli::parse();
    init_tracing(cli.verbose);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| miette::miette!("cannot start the async runtime: {e}"))?;
    rt.block_on(cmd::run(cli))
}

/// Logs go to stderr; `-v` raises kos's own level, `RUST_LOG` overrides everything.
fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn,kos=info,kos_sim=info,openstack_sdk=warn",
        1 => "info,kos=debug,kos_cloud=debug,kos_sim=debug,openstack_sdk=warn",
        _ => "debug,kos=trace,kos_cloud=trace,kos_sim=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
