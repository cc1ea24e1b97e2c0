//! `kos sim serve`: a simulated OpenStack cloud for people (and for the peer-client test). Its servers
//! run their user_data (kos-guest): a `kos up` against it makes a cluster whose API kubectl and kos
//! reach at its floating IP through the simulator's CONNECT proxy (`HTTPS_PROXY`, printed at
//! start), while it runs.

use std::io::Write;
use std::net::SocketAddr;

use kos_sim::{Sim, SimConfig};
use miette::{IntoDiagnostic, WrapErr};

use crate::cli::SimServeArgs;

pub async fn serve(args: SimServeArgs) -> miette::Result<()> {
    let mut cfg = match &args.config {
        Some(path) => SimConfig::from_yaml_file(path).map_err(|e| {
            miette::miette!(
                help = "see `kos sim serve --help` for the config keys",
                "{e}"
            )
        })?,
        None => SimConfig::demo(),
    };
    if let Some(scale) = args.time_scale {
        if !(scale.is_finite() && scale > 0.0) {
            miette::bail!(
                help = "use e.g. 1 for real time or 0.01 for 100x faster",
                "--time-scale must be a positive number, got {scale}"
            );
        }
        cfg.time_scale = scale;
    }
    if let Some(port) = args.proxy_port {
        cfg.proxy_port = port;
    }
    let proxy_port = cfg.proxy_port;
    let mut sim = Sim::serve(cfg, SocketAddr::from(([127, 0, 0, 1], args.port)), None)
        .await
        .into_diagnostic()
        .wrap_err_with(|| match proxy_port {
            0 => format!("cannot listen on 127.0.0.1:{}", args.port),
            p => format!(
                "cannot listen on 127.0.0.1:{} and the proxy's 127.0.0.1:{p}",
                args.port
            ),
        })?;
    let guests = kos_guest::sim::SimGuests::new().map_err(|e| miette::miette!("{e}"))?;
    sim.attach_guests(std::sync::Arc::new(guests));
    // It holds the simulator's password: 0600 like every file kos writes secrets into.
    crate::files::write_private(&args.clouds_yaml, sim.clouds_yaml("sim").as_bytes())?;

    let path = args.clouds_yaml.display();
    println!(
        "kos-sim: simulated OpenStack listening on {}",
        sim.base_url()
    );
    println!("  auth_url: {}", sim.auth_url());
    println!("  clouds.yaml (cloud `sim`): {path}");
    println!("  try: OS_CLIENT_CONFIG_FILE={path} openstack --os-cloud sim server list");
    println!(
        "  admin: {}/_sim/log, /_sim/counters, /_sim/faults, /_sim/kube-endpoints, /_sim/proxy",
        sim.base_url()
    );
    println!(
        "  proxy into the clusters' API endpoints: {}",
        sim.proxy_url()
    );
    println!(
        "  for kubectl and kos: export HTTPS_PROXY={} (a cluster's API at its floating IP)",
        sim.proxy_url()
    );
    // Line-buffered consumers (scripts waiting for the URL) need it now, not at exit.
    std::io::stdout().flush().into_diagnostic()?;

    shutdown_signal().await;
    println!("kos-sim: stopping");
    sim.stop().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
