//! The controller side of `kos bench ccm`: the Service controller over a cloud and a Kubernetes
//! API it is told of, its waits on the benchmark's scaled clock, driven over stdin. In this
//! library so that `kos-ccm bench-service` (hidden) runs it: the benchmark then measures the
//! binary that ships, its code, allocator settings and all (`kos bench ccm-controller` runs the
//! same where no kos-ccm binary is at hand).
//!
//! The protocol: one JSON [`BenchSpec`] line in; `ready` out once connected; then each `resync`
//! line in is one resync with nothing forced, `verify` one with a deep verify of members, each
//! answered `done`; the end of the input stops the controller.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kos_cloud::{CloudError, CloudProfile, IdOrName, ProfileAuth, RetryPolicy, Session};
use kube::runtime::events::Reporter;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::{CloudConfig, ConfigError};
use crate::context::Context;
use crate::lb::{LbError, LbSettings, LoadBalancers};
use crate::service::{self, ServiceSettings};

/// What the benchmark tells its controller (one JSON line, through the child's stdin only). Not
/// `Debug`: it holds the simulated cloud's password.
#[derive(Serialize, Deserialize)]
pub struct BenchSpec {
    pub auth_url: String,
    pub username: String,
    #[serde(serialize_with = "exposed")]
    pub password: SecretString,
    pub project: String,
    /// The cloud.conf (`[LoadBalancer]` and the rest); the session is made from the fields
    /// above, whatever its `[Global]` says.
    pub cloud_conf: String,
    pub kube_url: String,
    /// Real seconds per cloud second: the controller's waits are scaled by it.
    pub time_scale: f64,
    pub concurrency: u16,
    /// Cloud seconds between the lists of load balancers' states; 0: none (a day between).
    pub pending_poll_secs: f64,
}

/// The password as the pipe's JSON carries it: the one place it is written out.
fn exposed<S: serde::Serializer>(secret: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    use secrecy::ExposeSecret as _;
    s.serialize_str(secret.expose_secret())
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("reading or writing the benchmark's pipe: {0}")]
    Io(#[from] std::io::Error),
    #[error("the spec on stdin: {0}")]
    Spec(#[from] serde_json::Error),
    #[error("the spec's cloud.conf: {0}")]
    Config(#[from] ConfigError),
    #[error("the spec's Kubernetes API address: {0}")]
    KubeUrl(#[from] http::uri::InvalidUri),
    #[error("connecting to the cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("a resync: {0}")]
    Resync(#[from] LbError),
}

/// The load-balancer core with its waits and requeues on the scaled clock, and a session that
/// hands Octavia's busy 409 back to the pass (as kos-ccm's does).
#[must_use]
pub fn scaled_load_balancers(
    session: &Session,
    config: Arc<CloudConfig>,
    scale: f64,
) -> LoadBalancers {
    let mut s = LbSettings::new("bench");
    let scaled = |secs: f64| Duration::from_secs_f64(secs * scale);
    s.pending_requeue = scaled(5.0);
    s.retry_requeue = scaled(60.0);
    s.snapshot_max_age = scaled(10.0);
    let session = session.clone().with_retry_policy(RetryPolicy {
        retry_busy_load_balancer: false,
        ..session.retry_policy().clone()
    });
    LoadBalancers::new(session, config, s)
}

/// A password session to the benchmark's cloud, its retry delays on the scaled clock.
pub async fn connect(
    auth_url: &str,
    user: &str,
    password: &SecretString,
    project: &str,
    scale: f64,
) -> Result<Session, CloudError> {
    let profile = CloudProfile::new(
        "bench",
        auth_url.to_owned(),
        ProfileAuth::Password {
            user: IdOrName::Name(user.to_owned()),
            user_domain: Some(IdOrName::Id("default".into())),
            password: password.clone(),
            project: Some(IdOrName::Name(project.to_owned())),
            project_domain: Some(IdOrName::Id("default".into())),
        },
    );
    let d = RetryPolicy::default();
    let policy = RetryPolicy {
        base_delay: d.base_delay.mul_f64(scale),
        max_delay: d.max_delay.mul_f64(scale),
        max_retry_after: Duration::from_secs(1).mul_f64(scale),
        ..d
    };
    Ok(Session::connect(&profile).await?.with_retry_policy(policy))
}

/// Runs the protocol of the module docs over `input` and `output`.
pub async fn serve(
    mut input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> Result<(), BenchError> {
    let mut line = String::new();
    input.read_line(&mut line).await?;
    let spec: BenchSpec = serde_json::from_str(&line)?;
    let scale = spec.time_scale;
    let session = connect(
        &spec.auth_url,
        &spec.username,
        &spec.password,
        &spec.project,
        scale,
    )
    .await?;
    let config = Arc::new(CloudConfig::parse("cloud.conf", &spec.cloud_conf)?.config);
    let uri: http::Uri = spec.kube_url.parse()?;
    let client = kube::Client::try_from(kube::Config::new(uri))?;
    let lbs = Arc::new(scaled_load_balancers(&session, config.clone(), scale));
    let ctx = Arc::new(Context::new(
        session,
        (*config).clone(),
        "bench",
        client.clone(),
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some("bench".into()),
        },
    ));
    let scaled = |secs: f64| Duration::from_secs_f64(secs * scale);
    let settings = ServiceSettings {
        concurrency: spec.concurrency,
        // Resyncs are asked for on the input.
        resync_period: Duration::from_secs(24 * 3600),
        retry_min: scaled(5.0),
        retry_max: scaled(300.0),
        pending_poll: if spec.pending_poll_secs > 0.0 {
            scaled(spec.pending_poll_secs)
        } else {
            Duration::from_secs(24 * 3600)
        },
        ..ServiceSettings::default()
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(service::run(ctx, lbs.clone(), settings, None, async {
        let _ = rx.await;
    }));
    output.write_all(b"ready\n").await?;
    output.flush().await?;
    loop {
        line.clear();
        if input.read_line(&mut line).await? == 0 {
            break;
        }
        let command = line.trim();
        if command == "resync" || command == "verify" {
            if command == "verify" {
                lbs.verify_members();
            }
            // What the periodic resync does: a fresh observation, then a pass per Service.
            let nodes: Vec<Node> = kube::Api::all(client.clone())
                .list(&Default::default())
                .await?
                .items;
            let services: Vec<Service> = kube::Api::all(client.clone())
                .list(&Default::default())
                .await?
                .items;
            lbs.invalidate_snapshot();
            for s in &services {
                lbs.ensure_service(s, &nodes).await?;
            }
            output.write_all(b"done\n").await?;
            output.flush().await?;
        }
    }
    let _ = tx.send(());
    let _ = controller.await;
    Ok(())
}
