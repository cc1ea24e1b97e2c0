//! One in-process kos-sim per test, a cloud.conf pointing at it (read as the driver reads it),
//! the controller on that session, and a booted server to attach to.
#![allow(dead_code)] // Each test file uses a different part of this.

use std::sync::Arc;

use kos_ccm::config::CloudConfig;
use kos_cloud::model::compute::{Boot, Nic, ServerCreate};
use kos_cloud::model::image::ImageFilter;
use kos_cloud::model::network::{NetworkCreate, SubnetCreate};
use kos_cloud::{Env, RetryPolicy, Session};
use kos_csi::config::DriverConfig;
use kos_csi::controller::Controller;
use kos_csi::csi;
use kos_sim::{LatencyModel, Sim, SimConfig};

pub type R = Result<(), Box<dyn std::error::Error>>;
pub type E = Box<dyn std::error::Error>;

pub struct Cloud {
    pub sim: Sim,
    pub session: Session,
    pub conf: String,
    _dir: tempfile::TempDir,
}

/// A sim and a session made from a cloud.conf (`[Global]` at the sim, then `extra`).
pub async fn cloud(extra: &str) -> Result<Cloud, E> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let c = sim.config();
    let conf = format!(
        "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\nregion = {}\n\n{extra}",
        sim.auth_url(),
        c.username,
        c.password,
        c.project,
        c.region
    );
    let dir = tempfile::tempdir()?;
    let loaded = CloudConfig::parse("cloud.conf", &conf)?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let session = Session::connect(&loaded.config.profile(&env)?)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    Ok(Cloud {
        sim,
        session,
        conf,
        _dir: dir,
    })
}

impl Cloud {
    pub fn controller(&self, cluster: &str) -> Controller {
        self.controller_with(|_| {}, cluster)
    }

    pub fn controller_with(&self, f: impl FnOnce(&mut DriverConfig), cluster: &str) -> Controller {
        let loaded = CloudConfig::parse("cloud.conf", &self.conf).expect("cloud.conf");
        let mut cfg = DriverConfig::new(cluster, loaded.config.block_storage);
        f(&mut cfg);
        Controller::new(self.session.clone(), Arc::new(cfg))
    }

    /// Volumes stay `creating` until the test moves them ([`Cloud::set_status`]); a project
    /// with room for many.
    pub fn hold_creates(&self) {
        {
            let mut cloud = self.sim.app().cloud();
            cloud.quotas.volumes = 1000;
            cloud.quotas.gigabytes = 10_000;
        }
        self.sim.app().set_latency(LatencyModel {
            volume_create_secs: 1e9,
            ..LatencyModel::instant()
        });
    }

    /// Sets a volume's status in the sim, as Cinder's own work would.
    pub fn set_status(&self, id: &str, status: &str) -> R {
        let mut cloud = self.sim.app().cloud();
        let v = cloud
            .cinder
            .volumes
            .iter_mut()
            .find(|v| v.id == id)
            .ok_or("no such volume in the sim")?;
        v.status = status.into();
        Ok(())
    }

    /// Waits until Cinder shows the volume `available` (CreateVolume answers before).
    pub async fn available(&self, id: &str) -> R {
        self.session
            .block_storage()
            .wait_for_status(
                id,
                &[kos_cloud::model::block_storage::VolumeStatus::Available],
                deadline(),
            )
            .await?;
        Ok(())
    }

    /// An ACTIVE server (a node) on a fresh network.
    pub async fn server(&self, name: &str, cidr: &str) -> Result<String, E> {
        let s = &self.session;
        let net = s
            .network()
            .create_network(&NetworkCreate {
                name: format!("{name}-net"),
                ..Default::default()
            })
            .await?;
        s.network()
            .create_subnet(&SubnetCreate::new(&net.id, format!("{name}-subnet"), cidr))
            .await?;
        let mut flavors = s.compute().list_flavors().await?;
        flavors.sort_by_key(|f| (f.ram, f.vcpus));
        let flavor = flavors.first().ok_or("no flavor")?.id.clone();
        let image = s
            .image()
            .list_images(&ImageFilter::default())
            .await?
            .first()
            .ok_or("no image")?
            .id
            .clone();
        let mut req = ServerCreate::new(name, &flavor, Boot::Image(image));
        req.nics = vec![Nic::Network {
            id: net.id.clone(),
            fixed_ip: None,
        }];
        let server = s.compute().create_server(&req).await?;
        s.compute()
            .wait_for_server_active(&server.id, deadline())
            .await?;
        Ok(server.id)
    }
}

pub fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(30)
}

pub fn mount_cap() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

pub fn block_cap() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Block(BlockVolume {})),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

pub fn gib(n: i64) -> Option<csi::CapacityRange> {
    Some(csi::CapacityRange {
        required_bytes: n * kos_csi::GIB,
        limit_bytes: 0,
    })
}

pub fn create_req(name: &str, size_gib: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: gib(size_gib),
        volume_capabilities: vec![mount_cap()],
        ..Default::default()
    }
}
