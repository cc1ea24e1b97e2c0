//! Shared setup for the engine tests: a fast kos-sim, a session on it, a spec, and a `Resolved` built
//! through the facades (standing in for preflight), plus the converge/teardown helpers every test uses.
#![allow(dead_code)] // Each test file uses a different part of this.

use std::collections::BTreeMap;

use kos_cloud::model::image::ImageFilter;
use kos_cloud::{CloudProfile, Env, RetryPolicy, Session};
use kos_cluster::ClusterSpec;
use kos_cluster::apply::{ApplyError, ApplyOptions, ApplyReport, apply};
use kos_cluster::bootstrap::{Formation, MarkerBootstrap};
use kos_cluster::graph::{DesiredGraph, desired};
use kos_cluster::names::PoolName;
use kos_cluster::observe::observe;
use kos_cluster::plan::{Plan, plan};
use kos_cluster::resolved::{
    ExternalNetwork, Resolved, ResolvedBootVolume, ResolvedMachine, ResolvedNetwork,
};
use kos_cluster::spec::{EndpointKind, Machine, NetworkSource};
use kos_cluster::teardown::{TeardownOptions, teardown_with};
use kos_sim::{Sim, SimConfig};

pub type E = Box<dyn std::error::Error + Send + Sync>;
pub type R = Result<(), E>;

pub struct Cloud {
    pub sim: Sim,
    pub session: Session,
    _dir: tempfile::TempDir,
}

/// A fast simulator with room for 40 small servers, and a session on it.
pub async fn start() -> Result<Cloud, E> {
    start_with(SimConfig::fast()).await
}

pub async fn start_with(mut cfg: SimConfig) -> Result<Cloud, E> {
    cfg.token_lifetime_secs = 1e7;
    cfg.compute_hosts = cfg.compute_hosts.max(3);
    let q = &mut cfg.quotas;
    (q.instances, q.cores, q.ram_mb) = (100, 1000, 10_000_000);
    (q.ports, q.volumes, q.gigabytes, q.server_group_members) = (1000, 100, 10_000, 100);
    (q.security_groups, q.security_group_rules) = (100, 1000);
    let sim = Sim::start(cfg).await?;
    let dir = tempfile::tempdir()?;
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    let session = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    Ok(Cloud {
        sim,
        session,
        _dir: dir,
    })
}

pub const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBRy6hQTfuZ21OSeYgWgxWM66OLh6yHnC+cDozVhPY0b me@host";

/// What a test cluster looks like.
#[derive(Clone, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub control_planes: u32,
    pub load_balancer: bool,
    pub boot_volume: bool,
    /// `(pool, count, server group policy)`.
    pub pools: Vec<(&'static str, u32, &'static str)>,
}

impl Shape {
    pub fn small(name: &'static str, workers: u32) -> Self {
        Shape {
            name,
            control_planes: 1,
            load_balancer: false,
            boot_volume: false,
            pools: vec![("workers", workers, "soft-anti-affinity")],
        }
    }

    pub fn yaml(&self) -> String {
        let endpoint = if self.load_balancer {
            "type: loadBalancer\n    allowedCIDRs: [203.0.113.0/24]"
        } else {
            "type: floatingIP"
        };
        let boot = if self.boot_volume {
            "\n    bootVolume: {sizeGB: 20}"
        } else {
            ""
        };
        let pools: String = self
            .pools
            .iter()
            .map(|(n, c, p)| {
                format!(
                    "\n    - name: {n}\n      count: {c}\n      flavor: m1.tiny\n      image: ubuntu-24.04\n      serverGroupPolicy: {p}{}",
                    boot.replace("\n    ", "\n      ")
                )
            })
            .collect();
        format!(
            "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: {}\n  tags: [team=test]\nspec:\n  kubernetesVersion: \"1.36.4\"\n  sshPublicKey: {SSH_KEY}\n  network:\n    create:\n      cidr: 10.0.0.0/22\n    ssh:\n      allowedCIDRs: [192.0.2.0/24]\n  apiEndpoint:\n    {endpoint}\n  controlPlane:\n    count: {}\n    flavor: m1.small\n    image: ubuntu-24.04{boot}\n  nodePools:{pools}\n",
            self.name, self.control_planes
        )
    }

    pub fn spec(&self) -> Result<ClusterSpec, E> {
        kos_cluster::load("cluster.yaml", &self.yaml())
            .map(|l| l.spec)
            .map_err(|e| format!("{:?}", miette::Report::new(e)).into())
    }
}

/// Preflight's job, done here through the facades: every name in the spec resolved to an id.
pub async fn resolve(s: &Session, spec: &ClusterSpec) -> Result<Resolved, E> {
    let ext = s.network().external_network(None).await?;
    let machine = |m: &Machine| {
        let m = m.clone();
        async move {
            let flavor = s.compute().find_flavor(&m.flavor.value).await?;
            let image = s
                .image()
                .find_image(&ImageFilter {
                    name: Some("ubuntu-24.04".into()),
                    ..ImageFilter::default()
                })
                .await?;
            Ok::<_, E>(ResolvedMachine {
                flavor_id: flavor.id,
                flavor_name: flavor.name,
                vcpus: flavor.vcpus,
                ram_mb: flavor.ram,
                disk_gb: flavor.disk,
                image_id: image.id,
                availability_zones: m
                    .availability_zones
                    .iter()
                    .map(|z| z.value.clone())
                    .collect(),
                boot_volume: m.boot_volume.as_ref().map(|b| ResolvedBootVolume {
                    size_gb: b.size_gb,
                    volume_type: b.volume_type.as_ref().map(|t| t.value.clone()),
                    availability_zone: b.availability_zone.as_ref().map(|z| z.value.clone()),
                    // Unknown here: preflight lists Cinder's zones (engine_zones.rs runs it).
                    cinder_zones: None,
                }),
            })
        }
    };
    let mut pools = BTreeMap::new();
    for p in &spec.node_pools {
        pools.insert(
            PoolName::new(p.name.value.as_str())?,
            machine(&p.machine).await?,
        );
    }
    let network = match &spec.network.source {
        NetworkSource::Create(c) => ResolvedNetwork::Create {
            cidr: c.cidr.value,
            dns_servers: c.dns_servers.clone(),
        },
        NetworkSource::Existing(_) => return Err("tests create their network".into()),
    };
    Ok(Resolved {
        external_network: ExternalNetwork {
            id: ext.id,
            name: ext.name,
        },
        network,
        control_plane: machine(&spec.control_plane.machine).await?,
        pools,
        lb_provider: match spec.api_endpoint.kind.value {
            EndpointKind::LoadBalancer { provider } => Some(provider.as_str().to_owned()),
            EndpointKind::FloatingIp => None,
        },
        service_lb_provider: spec.service_lb_provider().map(|p| p.as_str().to_owned()),
        ccm_roles: kos_cluster::credential::ccm_roles(&s.token_roles())?,
        csi_volume_zone: None,
    })
}

pub async fn graph(s: &Session, shape: &Shape) -> Result<DesiredGraph, E> {
    let spec = shape.spec()?;
    let resolved = resolve(s, &spec).await?;
    Ok(desired(&spec, &resolved, Formation::Fresh)?)
}

pub async fn plan_for(s: &Session, g: &DesiredGraph) -> Result<Plan, E> {
    Ok(plan(g, &observe(s, &g.cluster).await?))
}

/// Observe, plan, apply once.
pub async fn up_once(s: &Session, g: &DesiredGraph) -> Result<Result<ApplyReport, ApplyError>, E> {
    let p = plan_for(s, g).await?;
    apply_plan(s, g, &p).await
}

/// Applies `p` as it is (its events dropped).
pub async fn apply_plan(
    s: &Session,
    g: &DesiredGraph,
    p: &Plan,
) -> Result<Result<ApplyReport, ApplyError>, E> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let out = apply(s, g, p, &MarkerBootstrap, ApplyOptions::fast(), tx).await;
    drain.await?;
    Ok(out)
}

/// Observe, plan, apply, and insist it worked.
pub async fn up(s: &Session, g: &DesiredGraph) -> Result<ApplyReport, E> {
    Ok(up_once(s, g).await??)
}

/// Runs until a run succeeds (at most `tries`), like a user re-running `kos up`.
pub async fn converge(s: &Session, g: &DesiredGraph, tries: u32) -> Result<ApplyReport, E> {
    let mut last = None;
    for _ in 0..tries {
        match up_once(s, g).await? {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(format!(
        "no convergence after {tries} runs: {}",
        last.unwrap_or_default()
    )
    .into())
}

/// The number of changes a fresh plan wants.
pub async fn pending(s: &Session, g: &DesiredGraph) -> Result<usize, E> {
    let p = plan_for(s, g).await?;
    if p.summary().changes() != 0 {
        eprintln!("{}", p.diff(false));
    }
    Ok(p.summary().changes())
}

/// Logical ids held by more than one object.
pub async fn duplicates(s: &Session, cluster: &str) -> Result<Vec<String>, E> {
    Ok(observe(s, cluster)
        .await?
        .duplicates()
        .map(|(id, rs)| {
            format!(
                "{id}: {}",
                rs.iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect())
}

/// Everything teardown would still find: tagged, kos-named and run-time objects.
pub async fn leftovers(s: &Session, cluster: &str) -> Result<Vec<String>, E> {
    let opts = TeardownOptions {
        dry_run: true,
        ..TeardownOptions::fast()
    };
    Ok(teardown_with(s, cluster, &opts)
        .await?
        .resources
        .into_iter()
        .map(|r| format!("{} {} {}", r.kind.as_str(), r.name, r.id))
        .collect())
}

pub async fn down(s: &Session, cluster: &str) -> R {
    teardown_with(s, cluster, &TeardownOptions::fast()).await?;
    let left = leftovers(s, cluster).await?;
    assert!(left.is_empty(), "leaks after teardown: {left:#?}");
    Ok(())
}
