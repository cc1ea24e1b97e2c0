//! The driver process: upstream's flags, cloud.conf, the services asked for, the socket, and
//! `--http-endpoint` metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{ArgAction, Args};
use kos_ccm::config::{CloudConfig, ConfigError, Loaded};
use kos_cloud::{CloudError, Env, Session};

use crate::config::{DriverConfig, NodeConfig};
use crate::controller::Controller;
use crate::identity::Identity;
use crate::metadata::{NodeMetadata, Sources};
use crate::metrics::Metrics;
use crate::node::{Kernel, NodeService, SystemKernel};
use crate::server::{self, ServeError, Services};

/// How long calls in flight may finish after SIGTERM (a pod's default grace is 30 s).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// cinder-csi-plugin's flags (cmd/cinder-csi-plugin/main.go), and kos's `--kubelet-dir`.
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// CSI endpoint, `unix:///csi/csi.sock`.
    #[arg(long)]
    pub endpoint: String,
    /// cloud.conf; may be given several times (later files add to earlier ones).
    #[arg(long = "cloud-config", value_delimiter = ',')]
    pub cloud_config: Vec<PathBuf>,
    /// The cluster's identifier, written to every volume and snapshot.
    #[arg(long, default_value = "")]
    pub cluster: String,
    /// The cluster is topology-aware.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true)]
    pub with_topology: bool,
    /// More topology segments of the node, `key=value`; may be repeated.
    #[arg(long = "additional-topology", value_delimiter = ',', value_parser = key_value)]
    pub additional_topology: Vec<(String, String)>,
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true)]
    pub provide_controller_service: bool,
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true)]
    pub provide_node_service: bool,
    /// Metrics address, `:8080`; empty: no HTTP server.
    #[arg(long, default_value = "")]
    pub http_endpoint: String,
    /// Where the kubelet keeps volumes; every node path must lie under it.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// Upstream's multi-cloud subsections: only the default cloud ("") is served.
    #[arg(long = "cloud-name", value_delimiter = ',', default_value = "")]
    pub cloud_name: Vec<String>,
    /// Deprecated upstream and ignored there too.
    #[arg(long, hide = true)]
    pub nodeid: Option<String>,
    #[arg(long, hide = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub node_service_no_os_client: Option<bool>,
    /// PVC annotations (scheduler hints) are not read by kos-csi; accepted for the manifests.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true)]
    pub pvc_annotations: bool,
    /// klog verbosity: 0-1 info, 2-3 debug, 4+ trace.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not key=value"))
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("connecting to OpenStack: {0}")]
    Cloud(#[from] CloudError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("--http-endpoint {addr}: {source}")]
    Http {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl Options {
    /// Checks what flags alone can show (upstream's PersistentPreRunE and more).
    pub fn check(&self) -> Result<(), RunError> {
        server::socket_path(&self.endpoint)?;
        if self.provide_controller_service && self.cloud_config.is_empty() {
            return Err(RunError::Usage(
                "--cloud-config is required with the controller service".into(),
            ));
        }
        if self.cloud_name.iter().any(|c| !c.is_empty()) {
            return Err(RunError::Usage(
                "--cloud-name: kos-csi serves only the default cloud ([Global])".into(),
            ));
        }
        if !self.provide_controller_service && !self.provide_node_service {
            return Err(RunError::Usage(
                "neither the controller nor the node service is provided".into(),
            ));
        }
        Ok(())
    }
}

/// Reads the cloud.conf files as one (gcfg reads them into one config, later ones adding).
/// A node without a cloud.conf runs with the defaults, as upstream's node does.
pub fn load_config(paths: &[PathBuf]) -> Result<Option<Loaded>, RunError> {
    let mut text = String::new();
    let mut names = Vec::new();
    for p in paths {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                text.push_str(&t);
                text.push('\n');
                names.push(p.display().to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && paths.len() == 1 => {
                return Ok(None);
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: p.clone(),
                    source,
                }
                .into());
            }
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    Ok(Some(CloudConfig::parse(&names.join(","), &text)?))
}

/// Runs until `shutdown`, on the machine's kernel and metadata.
pub async fn run(
    opts: Options,
    env: &Env,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let kernel: Arc<dyn Kernel> = Arc::new(SystemKernel::default());
    let loaded = load_config(&opts.cloud_config)?;
    let order = loaded
        .as_ref()
        .map(|l| l.config.metadata.search_order.clone())
        .unwrap_or_else(|| kos_ccm::config::Metadata::default().search_order);
    let metadata: Arc<dyn NodeMetadata> = Arc::new(Sources::new(order, kernel.clone()));
    run_with(opts, env, loaded, kernel, metadata, shutdown).await
}

/// As [`run`], with the cloud.conf read and the node's kernel and metadata given: for a caller
/// hosting the driver in its own process (the simulated cluster), or tests.
pub async fn run_with(
    opts: Options,
    env: &Env,
    loaded: Option<Loaded>,
    kernel: Arc<dyn Kernel>,
    metadata: Arc<dyn NodeMetadata>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    opts.check()?;
    if let Some(l) = &loaded {
        for w in &l.warnings {
            tracing::warn!("{w}");
        }
    }
    let block_storage = loaded
        .as_ref()
        .map(|l| l.config.block_storage.clone())
        .unwrap_or_default();
    let mut cfg = DriverConfig::new(opts.cluster.clone(), block_storage);
    cfg.with_topology = opts.with_topology;
    cfg.additional_topologies = opts
        .additional_topology
        .iter()
        .cloned()
        .collect::<BTreeMap<_, _>>();
    let cfg = Arc::new(cfg);
    let metrics = Arc::new(Metrics::new());

    let controller = match (&loaded, opts.provide_controller_service) {
        (Some(l), true) => {
            let profile = l.config.profile(env)?;
            let session = Session::connect(&profile)
                .await?
                .with_observer(metrics.clone());
            tracing::info!(cloud = %profile.name, region = ?session.region(), "connected to OpenStack");
            Some(Controller::new(session, cfg.clone()).with_metrics(metrics.clone()))
        }
        (None, true) => {
            return Err(RunError::Usage(
                "--cloud-config: no such file, and the controller service needs one".into(),
            ));
        }
        (_, false) => None,
    };
    let node = opts.provide_node_service.then(|| {
        NodeService::new(
            kernel,
            metadata,
            cfg.clone(),
            NodeConfig {
                kubelet_dir: opts.kubelet_dir.clone(),
            },
        )
        .with_metrics(metrics.clone())
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let http = if opts.http_endpoint.is_empty() {
        None
    } else {
        let addr = http_addr(&opts.http_endpoint)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Http {
                addr: opts.http_endpoint.clone(),
                source,
            })?;
        Some(tokio::spawn(crate::metrics::serve(
            listener,
            metrics.clone(),
            stopped(),
        )))
    };

    let path = server::socket_path(&opts.endpoint)?;
    let listener = server::bind(&path)?;
    tracing::info!(endpoint = %opts.endpoint, controller = controller.is_some(), node = node.is_some(), "serving CSI");
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let serving = server::serve(
        listener,
        Services {
            identity: Identity {
                with_topology: cfg.with_topology,
            },
            controller,
            node,
        },
        stopped(),
    );
    // Stopping lets calls in flight finish, for a while: a client that never answers HTTP/2's
    // goodbye must not keep the process past its grace period.
    let grace = async {
        stopped().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        r = serving => r,
        () = grace => {
            tracing::warn!("calls still open {SHUTDOWN_GRACE:?} after the stop; exiting");
            Ok(())
        }
    };
    if let Some(h) = http {
        let _ = h.await;
    }
    let _ = std::fs::remove_file(&path);
    Ok(served?)
}

/// Go's `:8080` means every address.
fn http_addr(s: &str) -> Result<SocketAddr, RunError> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse()
        .map_err(|e| RunError::Usage(format!("--http-endpoint {s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        opts: Options,
    }

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Flags::try_parse_from(std::iter::once("kos-csi").chain(args.iter().copied()))
            .map(|f| f.opts)
    }

    #[test]
    fn upstreams_flags_parse_as_go_writes_them() -> Result<(), Box<dyn std::error::Error>> {
        // The upstream controller plugin's args (manifests/cinder-csi-plugin).
        let o = parse(&[
            "--endpoint=unix://csi/csi.sock",
            "--cloud-config=/etc/config/cloud.conf",
            "--cluster=kubernetes",
            "--http-endpoint=:8080",
            "--v=1",
        ])?;
        assert_eq!(o.cluster, "kubernetes");
        assert!(o.with_topology && o.provide_controller_service && o.provide_node_service);
        o.check()?;
        let o = parse(&[
            "--endpoint=unix:///csi/csi.sock",
            "--provide-controller-service=false",
            "--with-topology=false",
            "--additional-topology=topology.kubernetes.io/region=r1,topology.kubernetes.io/zone=z",
            "--nodeid=ignored",
        ])?;
        o.check()?;
        assert!(!o.with_topology && !o.provide_controller_service);
        assert_eq!(o.additional_topology.len(), 2);
        assert_eq!(o.additional_topology[0].1, "r1");
        assert_eq!(http_addr(":8080")?.port(), 8080);
        // The controller needs a cloud.conf; a second cloud is not served.
        let o = parse(&["--endpoint=unix:///csi/csi.sock"])?;
        assert!(matches!(o.check(), Err(RunError::Usage(_))));
        let o = parse(&[
            "--endpoint=unix:///csi/csi.sock",
            "--cloud-config=/c",
            "--cloud-name=other",
        ])?;
        assert!(matches!(o.check(), Err(RunError::Usage(_))));
        Ok(())
    }

    #[test]
    fn cloud_conf_files_are_read_as_one_and_a_node_may_have_none()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let a = dir.path().join("a.conf");
        let b = dir.path().join("b.conf");
        std::fs::write(
            &a,
            "[Global]\nauth-url = https://k:5000/v3\nusername = u\npassword = p\ntenant-name = t\nregion = r\n",
        )?;
        std::fs::write(
            &b,
            "[BlockStorage]\nnode-volume-attach-limit = 25\nrescan-on-resize = true\nignore-volume-az = true\nignore-volume-microversion = true\n",
        )?;
        let l = load_config(&[a, b])?.ok_or("nothing read")?;
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        let bs = &l.config.block_storage;
        assert_eq!(bs.node_volume_attach_limit, Some(25));
        assert!(bs.rescan_on_resize && bs.ignore_volume_az && bs.ignore_volume_microversion);
        assert!(load_config(&[dir.path().join("none.conf")])?.is_none());
        Ok(())
    }
}
