//! The `kos-operator` binary. With no subcommand it runs the controller, with the in-cluster
//! configuration or `KUBECONFIG` (or `--kubeconfig`), as any controller does; `kos-operator crd`
//! prints the CustomResourceDefinition and `kos-operator manifests` everything `kubectl apply`
//! needs to run it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kos_operator::reconcile::Settings;
use kos_operator::run::{Leader, Options};

#[derive(Parser)]
#[command(
    name = "kos-operator",
    version,
    about = "kos as a Kubernetes controller for clusters.kos.dev resources",
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
    /// Print the clusters.kos.dev CustomResourceDefinition (YAML).
    Crd,
    /// Print the Namespace, CRD, ServiceAccount, RBAC and Deployment that run kos-operator (YAML).
    Manifests {
        /// The kos-operator image the Deployment runs (kos publishes none: build and host it).
        #[arg(long)]
        image: String,
    },
}

#[derive(Args)]
struct RunArgs {
    /// A kubeconfig file; default: `KUBECONFIG`, then `~/.kube/config`, then the in-cluster
    /// ServiceAccount.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Campaign for a Lease, so that of several replicas one reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's namespace; default: `POD_NAMESPACE`, else kos-system.
    #[arg(long)]
    leader_elect_namespace: Option<String>,
    /// How long a Lease holds without renewal (seconds).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=600))]
    leader_elect_lease_duration: u64,
    /// How long before expiry the holder renews (seconds; less than the duration).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    leader_elect_renew_margin: u64,
    /// How often a standby looks whether the Lease was released (seconds).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=60))]
    leader_elect_retry_period: u64,
    /// Where `/metrics` is served (`host:port`, `:port`; `0` turns it off).
    #[arg(long, default_value = ":8080")]
    metrics_bind_address: String,
    /// Where `/healthz` and `/readyz` are served (`0` turns them off).
    #[arg(long, default_value = ":8081")]
    health_probe_bind_address: String,
    /// Where cluster-autoscaler's externalgrpc CloudProvider is served, with mutual TLS
    /// (`host:port`, `:port`; `0`, the default, turns it off).
    #[arg(long, default_value = "0")]
    autoscaler_bind_address: String,
    /// The directory of the endpoint's `tls.crt`, `tls.key` and `ca.crt` (the CA of the
    /// autoscalers' client certificates, each named `<namespace>/<cluster>`). Without `tls.crt`,
    /// the CA's `ca.key` there signs the endpoint's certificate for the host of
    /// `--autoscaler-advertise-address`.
    #[arg(long, default_value = "/etc/kos-operator/autoscaler-tls")]
    autoscaler_tls_dir: PathBuf,
    /// The `host:port` the managed clusters' autoscalers dial (the serving certificate names the
    /// host): with it, and a `ca.key` in `--autoscaler-tls-dir` that signed `ca.crt`, the operator
    /// installs cluster-autoscaler into each Cluster with an autoscaled pool.
    #[arg(long)]
    autoscaler_advertise_address: Option<String>,
    /// Runs at once against one cloud project (they share its rate limit).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    max_runs_per_project: u32,
    /// How often a Ready Cluster is looked at again (seconds).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    resync_period: u64,
    /// How long after a failed reconcile it is tried again (seconds).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    retry_period: u64,
}

/// `:8080` (all interfaces), `host:port`, or `0` (off).
fn address(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" {
        return Ok(None);
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    };
    full.parse()
        .map(Some)
        .map_err(|e| format!("--{flag} {value:?}: {e} (give host:port, :port or 0)"))
}

fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "kos-operator".to_owned());
    // Unique even when two replicas share a name (a restarted pod, two processes on one host).
    format!("{base}_{:08x}", rand::random::<u32>())
}

async fn client(path: Option<&PathBuf>) -> Result<kube::Client, String> {
    let config = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("--kubeconfig {}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("--kubeconfig {}: {e}", p.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!("no Kubernetes API configured (KUBECONFIG, ~/.kube/config or in-cluster): {e}")
        })?,
    };
    let mut config = config;
    kos_control::kube::direct_where_kubectl_is(&mut config);
    kube::Client::try_from(config).map_err(|e| format!("the Kubernetes client: {e}"))
}

async fn run(args: RunArgs) -> Result<(), String> {
    let metrics = address("metrics-bind-address", &args.metrics_bind_address)?;
    let probes = address("health-probe-bind-address", &args.health_probe_bind_address)?;
    if args.leader_elect_renew_margin >= args.leader_elect_lease_duration {
        return Err(
            "--leader-elect-renew-margin must be less than --leader-elect-lease-duration".into(),
        );
    }
    let client = client(args.kubeconfig.as_ref()).await?;
    let leader = args.leader_elect.then(|| Leader {
        namespace: args
            .leader_elect_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| kos_operator::manifests::NAMESPACE.to_owned()),
        name: kos_operator::rbac::LEASE_NAME.to_owned(),
        identity: identity(),
        lease_duration: Duration::from_secs(args.leader_elect_lease_duration),
        renew_margin: Duration::from_secs(args.leader_elect_renew_margin),
        retry_period: Duration::from_secs(args.leader_elect_retry_period),
    });
    let opts = Options {
        settings: Settings {
            resync: Duration::from_secs(args.resync_period),
            retry: Duration::from_secs(args.retry_period),
            per_project: args.max_runs_per_project as usize,
            autoscaler: match &args.autoscaler_advertise_address {
                Some(a) => Some(Arc::new(
                    kos_operator::autoscaler::install::Install::load(a, &args.autoscaler_tls_dir)
                        .map_err(|e| format!("--autoscaler-advertise-address: {e}"))?,
                )),
                None => None,
            },
            ..Settings::default()
        },
        leader,
        metrics,
        probes,
        autoscaler: address("autoscaler-bind-address", &args.autoscaler_bind_address)?.map(|a| {
            (
                a,
                args.autoscaler_tls_dir.clone(),
                args.autoscaler_advertise_address.clone(),
            )
        }),
    };
    // Cluster APIs at their own addresses (through `HTTPS_PROXY` when set, as kubectl).
    let reach = Arc::new(kos_control::connect::Direct);
    let shutdown = async {
        let term = async {
            #[cfg(unix)]
            if let Ok(mut s) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            {
                s.recv().await;
                return;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
        tracing::info!("shutting down");
    };
    kos_operator::run::run(client, reach, opts, shutdown)
        .await
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let printed = match cli.command {
        Some(Command::Crd) => Some(kos_operator::resource::crd_yaml()),
        Some(Command::Manifests { image }) => Some(kos_operator::manifests::yaml(&image)),
        None => None,
    };
    if let Some(text) = printed {
        return match text {
            Ok(t) => {
                print!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kos-operator: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // kube-client's trace layer logs every failed request at ERROR, twice a second for a
    // cluster whose API does not answer yet while it is made; the reconcile says what failed
    // (its status, a WARN line), so those lines stay out unless RUST_LOG asks for them.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "info,openstack_sdk=warn,kube_client::client::builder=off",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A turn's future is deep (kos up's whole run); 2 MiB overflowed in a debug build.
        .thread_stack_size(8 << 20)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kos-operator: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kos-operator: {e}");
            ExitCode::FAILURE
        }
    }
}
