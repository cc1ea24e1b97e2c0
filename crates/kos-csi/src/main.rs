//! The `kos-csi` binary: cinder-csi-plugin's flags; exits 0 when stopped, 1 when it failed,
//! 2 on bad usage.

use std::process::ExitCode;

use clap::Parser;
use kos_csi::run::{Options, RunError};

#[derive(Parser)]
#[command(
    name = "kos-csi",
    version,
    about = "Cinder CSI driver: a drop-in for cloud-provider-openstack's cinder-csi-plugin"
)]
struct Cli {
    #[command(flatten)]
    opts: Options,
}

/// Manifests run `args: [/bin/cinder-csi-plugin, --flags…]` on images whose entrypoint is the
/// driver: a leading binary path is dropped.
fn args() -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = std::env::args_os().collect();
    let is_binary_path = |a: &std::ffi::OsString| {
        let s = a.to_string_lossy();
        !s.starts_with('-') && (s.ends_with("/cinder-csi-plugin") || s.ends_with("/kos-csi"))
    };
    if args.len() > 1 && is_binary_path(&args[1]) {
        args.remove(1);
    }
    args
}

fn init_logging(verbosity: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbosity {
        0 | 1 => "info,openstack_sdk=warn",
        2 | 3 => "info,kos_csi=debug,kos_cloud=debug,openstack_sdk=warn",
        _ => "debug,kos_csi=trace,kos_cloud=trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

async fn sigterm() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(args());
    if let Err(e) = cli.opts.check() {
        eprintln!("kos-csi: {e}");
        return ExitCode::from(2);
    }
    init_logging(cli.opts.verbosity);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kos-csi: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let env = kos_cloud::Env::process();
    match runtime.block_on(kos_csi::run::run(cli.opts, &env, sigterm())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ RunError::Usage(_)) => {
            eprintln!("kos-csi: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
