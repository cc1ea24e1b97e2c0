//! Shared setup for the facade tests: one in-process kos-sim per test, a session on it through a
//! temporary clouds.yaml, and the objects most tests need (a tagged network with a subnet).
#![allow(dead_code)] // Each test file uses a different part of this.

use std::time::Duration;

use kos_cloud::model::TagQuery;
use kos_cloud::model::network::{NetworkCreate, Subnet, SubnetCreate};
use kos_cloud::{CloudProfile, Env, RetryPolicy, Session};
use kos_sim::{Sim, SimConfig};
use tokio::time::Instant;

pub type R = Result<(), Box<dyn std::error::Error>>;

pub const CLUSTER_TAG: &str = "kos-cluster=t1";

pub struct Cloud {
    pub sim: Sim,
    pub session: Session,
    pub profile: CloudProfile,
    _dir: tempfile::TempDir,
}

pub async fn start() -> Result<Cloud, Box<dyn std::error::Error>> {
    start_with(SimConfig::fast()).await
}

pub async fn start_with(cfg: SimConfig) -> Result<Cloud, Box<dyn std::error::Error>> {
    let sim = Sim::start(cfg).await?;
    let dir = tempfile::tempdir()?;
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    // No HOME and no /etc/openstack: only the file written here is read.
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    let session = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    Ok(Cloud {
        sim,
        session,
        profile,
        _dir: dir,
    })
}

/// Generous: the fast simulator finishes transitions in milliseconds.
pub fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

pub fn tags(id: &str) -> Vec<String> {
    vec![CLUSTER_TAG.to_owned(), format!("kos-id={id}")]
}

pub fn cluster() -> TagQuery {
    TagQuery::all([CLUSTER_TAG])
}

/// A tagged network with one subnet.
pub async fn network_with_subnet(
    s: &Session,
    cidr: &str,
) -> Result<Subnet, Box<dyn std::error::Error>> {
    let net = s
        .network()
        .create_network(&NetworkCreate {
            name: "kos-t1-net".into(),
            tags: tags("net"),
            ..Default::default()
        })
        .await?;
    let sub = s
        .network()
        .create_subnet(&SubnetCreate {
            tags: tags("subnet"),
            ..SubnetCreate::new(&net.id, "kos-t1-subnet", cidr)
        })
        .await?;
    Ok(sub)
}

/// Polls `check` every 20 ms until it is true or 30 s have passed; returns the last answer.
pub async fn poll<F, Fut>(mut check: F) -> Result<bool, kos_cloud::CloudError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, kos_cloud::CloudError>>,
{
    let end = deadline();
    loop {
        if check().await? {
            return Ok(true);
        }
        if Instant::now() >= end {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
