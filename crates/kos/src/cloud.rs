//! Which cloud a command talks to: a real one (clouds.yaml / `OS_CLOUD` / `OS_*`, through kos-cloud), or
//! `--cloud sim`, an in-process simulated cloud whose state is kept under the user's data directory so
//! that `kos up`, `kos plan`, `kos status` and `kos down` share one cloud across invocations.
//!
//! The simulated cloud runs its servers' user_data (kos-guest): the clusters they make, with their
//! API objects, are saved next to the cloud's state and come back with it. It listens on the port it
//! had before when that is free, because the clusters' cloud controllers were told its Keystone URL.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kos_cloud::Session;
use kos_cloud::config::{CloudProfile, IdOrName, ProfileAuth};
use kos_guest::sim::SimGuests;
use kos_sim::{Sim, SimConfig};
use miette::{IntoDiagnostic, WrapErr};
use secrecy::SecretString;

use crate::cmd::Failure;

/// The name that selects the embedded simulator.
pub const SIM: &str = "sim";

/// Cloud seconds run 100x faster in the demo: a server boots in 0.3 s, an LB in 0.6 s.
const DEMO_TIME_SCALE: f64 = 0.01;

/// A connected session, and the embedded simulator behind it when there is one.
pub struct Connected {
    pub session: Session,
    embedded: Option<Embedded>,
}

struct Embedded {
    sim: Sim,
    state: PathBuf,
    /// Held for the command's lifetime: two `kos --cloud sim` at once would otherwise each save their
    /// own copy of the cloud, and one would be lost.
    _lock: File,
}

/// The embedded simulated cloud serves no Kubernetes API at the endpoint.
#[derive(Debug, thiserror::Error)]
#[error(
    "the simulated cloud serves no Kubernetes API at {0} (no control plane ran `kubeadm init` for it)"
)]
pub struct NotServed(String);

/// A cluster of the embedded simulated cloud, which lives in this process, is reached through the
/// local address its guests forward the endpoint from. Any other cloud's (a served simulator's
/// too) at its own address, through `HTTPS_PROXY` when set, as kubectl reaches it.
impl kos_control::connect::Reach for Connected {
    fn local_address<'a>(
        &'a self,
        ep: &'a kos_bootstrap::ApiEndpoint,
    ) -> kos_control::connect::Reaching<'a> {
        use kos_control::connect::ReachError;
        Box::pin(async move {
            let Some(e) = &self.embedded else {
                return Ok(None);
            };
            let want = ep.to_string();
            e.sim
                .app()
                .guests()
                .map(|rt| rt.kube_endpoints())
                .unwrap_or_default()
                .into_iter()
                .find(|e| e.endpoint == want)
                .map(|e| Some(e.local))
                .ok_or_else(|| ReachError(Box::new(NotServed(want))))
        })
    }
}

impl Connected {
    /// The session, and the way to its clusters' APIs, as kos-control takes them.
    pub fn cloud(&self) -> kos_control::connect::Cloud<'_> {
        kos_control::connect::Cloud {
            session: &self.session,
            reach: self,
        }
    }

    /// Saves the simulated cloud (nothing to do for a real one), after its clusters' controllers
    /// stopped. Call it on every exit path that may have changed the cloud, errors included.
    pub async fn close(self) -> miette::Result<()> {
        if let Some(e) = self.embedded {
            e.sim.shutdown_guests().await;
            e.sim.save(&e.state).into_diagnostic()?;
        }
        Ok(())
    }
}

/// kos's data directory: `$KOS_DATA_DIR`, else the platform's (`~/.local/share/kos`).
pub fn data_dir() -> miette::Result<PathBuf> {
    if let Some(d) = std::env::var_os("KOS_DATA_DIR") {
        return Ok(PathBuf::from(d));
    }
    dirs::data_dir().map(|d| d.join("kos")).ok_or_else(|| {
        miette::miette!(
            help = "set KOS_DATA_DIR to a directory kos may write to",
            "no data directory on this system"
        )
    })
}

/// Connects to `cloud` (a clouds.yaml name, or `None` for `OS_CLOUD` / `OS_*`). `sim` is the embedded
/// simulator, unless the clouds.yaml on the search path defines a cloud `sim` itself (the one
/// `kos sim serve` writes): then that one, so a served simulator can be used by its name.
pub async fn connect(cloud: Option<&str>) -> Result<Connected, Failure> {
    if cloud == Some(SIM) {
        match CloudProfile::defined_in(&kos_cloud::Env::process(), SIM)
            .map_err(|e| Failure::connect(&e))?
        {
            // A served simulator's clouds.yaml takes the name from the embedded one: say so.
            Some(file) => eprintln!(
                "kos: cloud `sim` from {}",
                crate::term::printable(&file.display().to_string())
            ),
            None => {
                return connect_sim(&data_dir().map_err(Failure::input)?.join("sim"))
                    .await
                    .map_err(Failure::input);
            }
        }
    }
    let session = Session::from_env_or_clouds(cloud)
        .await
        .map_err(|e| Failure::connect(&e))?;
    Ok(Connected {
        session,
        embedded: None,
    })
}

async fn connect_sim(dir: &Path) -> miette::Result<Connected> {
    // The simulated cloud's state holds its users' passwords.
    crate::files::create_private_dir(dir)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot create {}", dir.display()))?;
    let lock = File::create(dir.join("lock"))
        .into_diagnostic()
        .wrap_err("cannot create the simulator's lock file")?;
    lock.lock()
        .into_diagnostic()
        .wrap_err("cannot lock the simulated cloud")?;
    let state = dir.join("state.json");
    let saved = kos_sim::persist::load(&state).into_diagnostic()?;
    let saved_guests = kos_sim::persist::load_guests(&state).into_diagnostic()?;
    let cfg = SimConfig {
        time_scale: DEMO_TIME_SCALE,
        ..SimConfig::demo()
    };
    let port_file = dir.join("port");
    let port: u16 = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    // The port of the last run, when it is free (another program may have taken it since).
    let port = if port != 0 && std::net::TcpListener::bind(at(port)).is_err() {
        tracing::warn!(
            "port {port} of the simulated cloud is taken: its clusters' cloud controllers, told that address, cannot reach it any more"
        );
        0
    } else {
        port
    };
    let mut sim = Sim::serve(cfg, at(port), saved)
        .await
        .into_diagnostic()
        .wrap_err("cannot start the simulated cloud")?;
    std::fs::write(&port_file, sim.addr().port().to_string())
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", port_file.display()))?;
    let guests = match saved_guests {
        Some(bytes) => SimGuests::restore(&bytes),
        None => SimGuests::new(),
    }
    .map_err(|e| miette::miette!("{e}"))?;
    sim.attach_guests(Arc::new(guests));
    let c = sim.config();
    let profile = CloudProfile::new(
        SIM,
        sim.auth_url(),
        ProfileAuth::Password {
            user: IdOrName::Name(c.username.clone()),
            user_domain: Some(IdOrName::Id("default".into())),
            password: SecretString::from(c.password.clone()),
            project: Some(IdOrName::Name(c.project.clone())),
            project_domain: Some(IdOrName::Id("default".into())),
        },
    );
    let session = Session::connect(&profile)
        .await
        .into_diagnostic()
        .wrap_err("cannot connect to the simulated cloud")?;
    Ok(Connected {
        session,
        embedded: Some(Embedded {
            sim,
            state,
            _lock: lock,
        }),
    })
}
