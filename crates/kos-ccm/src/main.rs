//! The `kos-ccm` binary: without a subcommand it runs the cloud-controller-manager with the
//! upstream's flags; `kos-ccm check-config` checks a cloud.conf.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kos_ccm::check::{Format, check_config};
use kos_ccm::options::RunArgs;

#[derive(Parser)]
#[command(
    name = "kos-ccm",
    version,
    about = "OpenStack cloud-controller-manager: the upstream's cloud.conf, flags and annotations",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
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
    /// `kos bench ccm`'s controller: the Service controller driven over stdin (see
    /// `kos_ccm::bench`), so the benchmark measures this binary.
    #[command(hide = true)]
    BenchService,
}

/// The arguments, without a leading binary path: the upstream manifests run
/// `args: [/bin/openstack-cloud-controller-manager, --flags…]`, which reaches an image whose
/// entrypoint is kos-ccm as a first positional argument.
fn args() -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = std::env::args_os().collect();
    let is_binary_path = |a: &std::ffi::OsString| {
        let s = a.to_string_lossy();
        !s.starts_with('-')
            && (s.ends_with("/openstack-cloud-controller-manager") || s.ends_with("/kos-ccm"))
    };
    if args.len() > 1 && is_binary_path(&args[1]) {
        args.remove(1);
    }
    args
}

fn init_logging(verbosity: u8) {
    use tracing_subscriber::EnvFilter;
    // klog's levels: 0-1 info, 2-3 debug, 4 and more trace; RUST_LOG wins when set.
    // The SDK logs every request at info: kos-cloud's own call records (debug) say it once, without
    // the request's Debug dump.
    let default = match verbosity {
        0 | 1 => "info,openstack_sdk=warn",
        2 | 3 => "info,kos_ccm=debug,kos_cloud=debug,openstack_sdk=warn",
        _ => "debug,kos_ccm=trace,kos_cloud=trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A container's log is a pipe: colour codes there are noise in every log collector.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

async fn sigterm() {
    #[cfg(unix)]
    {
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
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// glibc's allocator set up as `kos_ccm::malloc` says (its docs say why), unless the
/// environment tunes it already. Before anything else: the settings must be in place before a
/// second thread exists, or that thread's arena is already made.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_malloc() {
    use kos_ccm::malloc::{ARENA_MAX, MMAP_THRESHOLD, tuned_by_env};
    if tuned_by_env(|k| std::env::var_os(k)) {
        return;
    }
    // SAFETY: mallopt only changes the allocator's parameters, is called while this is the only
    // thread, and its result (0 on a refused value) leaves glibc's defaults, which work.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

fn main() -> ExitCode {
    tune_malloc();
    let cli = Cli::parse_from(args());
    match cli.command {
        Some(Command::CheckConfig {
            cloud_config,
            format,
        }) => {
            let out = check_config(&cloud_config, format, &kos_cloud::Env::process());
            print!("{}", out.stdout);
            eprint!("{}", out.stderr);
            if out.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Some(Command::BenchService) => {
            init_logging(0);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("kos-ccm: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let input = tokio::io::BufReader::new(tokio::io::stdin());
            match runtime.block_on(kos_ccm::bench::serve(input, tokio::io::stdout())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kos-ccm bench-service: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        None => {
            let opts = match cli.run.check() {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("kos-ccm: {e}");
                    return ExitCode::from(2);
                }
            };
            init_logging(opts.verbosity);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("kos-ccm: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let env = kos_cloud::Env::process();
            match runtime.block_on(kos_ccm::run::run(opts, &env, sigterm())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
