//! `kos`: Kubernetes on OpenStack.

mod cli;
mod cloud;
mod cmd;
mod files;
mod local;
mod progress;
mod term;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are successes; every usage error is "invalid input" (3).
            return if e.use_stderr() {
                // Plain text, the argument that was refused escaped: it may hold terminal escapes.
                eprint!("{}", term::escape(&e.render().to_string()));
                ExitCode::from(3)
            } else {
                let _ = e.print();
                ExitCode::SUCCESS
            };
        }
    };
    init_tracing(cli.verbose);
    term::init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kos: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(cmd::run(cli)) {
        Ok(exit) => exit.into(),
        Err(f) => {
            eprintln!("{}", term::report(&f.report));
            ExitCode::from(f.code)
        }
    }
}

/// `println!` panics when the reader of stdout has gone (`kos artefacts | head`). kos then ends as a
/// program killed by SIGPIPE would, quietly with 141, instead of printing a panic; the workspace
/// forbids the unsafe call that would restore SIGPIPE's default action.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Logs go to stderr; `-v` raises kos's own level, `RUST_LOG` overrides everything.
fn init_tracing(verbose: u8) {
    let default = match verbose {
        // Progress lines are what a run says; log lines only with -v (warnings always). The SDK's
        // own errors come back to kos as errors, which say more: its logs only repeat them. The
        // simulated clusters' cloud controllers and CSI drivers run in-process: their logs are
        // theirs, not kos's. `kos sim serve` logs what it serves at info. kube-rs logs every
        // failed request at ERROR (twice a second while an API is unreachable); kos waits and
        // says what it waits for.
        0 => "warn,kos_sim=info,openstack_sdk=off,kube_client=off",
        1 => {
            "info,kos=debug,kos_cloud=debug,kos_cluster=debug,kos_sim=debug,kos_ccm=info,kos_csi=info,openstack_sdk=warn"
        }
        _ => "debug,kos=trace,kos_cloud=trace,kos_cluster=trace,kos_sim=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: escape codes in a redirected log or a CI capture are noise.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
