//! kos-e2e: the real-cloud test tier.
//!
//! Every scenario in [`scenarios`] is an async fn over a [`Ctx`] (a kos-cloud [`Session`] plus a
//! per-run name prefix). The same code runs against an in-process kos-sim (`tests/hermetic.rs`, always)
//! and against a real OpenStack named by `KOS_E2E_CLOUD` (`tests/real_cloud.rs`, `--ignored`). Each
//! scenario registers what it makes in a [`Cleanup`], which runs whatever the outcome, and ends by
//! checking that nothing with the run's tag or prefix is left.
//!
//! Cluster-level scenarios drive the `kos` CLI itself ([`cli`]) against the same targets, on the
//! example clusters rewritten for the target ([`examples`]), and check the cloud through the facades
//! ([`census`]).
//!
//! [`fidelity`] runs one recorded call sequence against both targets and compares them.

pub mod census;
pub mod cleanup;
pub mod cli;
pub mod examples;
pub mod fidelity;
pub mod rules;
pub mod scenarios;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::compute::Flavor;
use kos_cloud::model::image::{Image, ImageFilter};
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::model::network::{
    FloatingIpFilter, Network, NetworkFilter, PortFilter, RouterFilter, SecurityGroupFilter,
    SubnetFilter,
};
use kos_cloud::{CloudProfile, Env, ProfileAuth, RetryPolicy, Session};
use kos_sim::{Sim, SimConfig};
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};

/// The workspace of the checkout under test: `CARGO_MANIFEST_DIR` as cargo gives the test at run
/// time (the compiled-in one may be another checkout's, sharing the target directory).
pub fn workspace() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../..")
}
use tokio::time::Instant;

pub use cleanup::{Cleanup, Made};
use cli::{CliCloud, Kos};

/// The image of kos-sim's catalogue whose guests can run kubeadm.
const SIM_NODE_IMAGE: &str = "ubuntu-24.04";
/// Names the clouds.yaml cloud of the real tier (falls back to `OS_CLOUD`).
pub const CLOUD_VAR: &str = "KOS_E2E_CLOUD";

/// What `#[ignore]` says on every real-cloud test, so a run without a cloud reports them as ignored.
pub const NEEDS_CLOUD: &str = "needs a real cloud: set KOS_E2E_CLOUD (see docs/testing.md)";

/// The longest any single wait may take (a real LB is ~10 s, a server 5–12 s): generous, never asserted.
pub const WAIT: Duration = Duration::from_secs(120);

/// The cloud name of the hermetic target's clouds.yaml: not `sim`, which the CLI would take for its
/// embedded simulator if the file were not found.
const SIM_CLOUD: &str = "kos-e2e-sim";

/// How many cluster scenarios run at once against one real cloud (they share its quotas):
/// `KOS_E2E_CLUSTERS_AT_ONCE`, default 2.
const CLUSTERS_AT_ONCE: usize = 2;

/// Where a scenario runs.
#[derive(Debug, Clone)]
pub enum Target {
    /// A fresh kos-sim in this process (boxed: a config is large next to a cloud name).
    Sim(Box<SimConfig>),
    /// A cloud from clouds.yaml (`file`, else the usual search path).
    Cloud { name: String, file: Option<PathBuf> },
}

impl Target {
    pub fn sim(cfg: SimConfig) -> Target {
        Target::Sim(Box::new(cfg))
    }

    /// The cloud named by `KOS_E2E_CLOUD` or `OS_CLOUD` (with `OS_CLIENT_CONFIG_FILE`), if any.
    pub fn from_env() -> Option<Target> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let name = var(CLOUD_VAR).or_else(|| var("OS_CLOUD"))?;
        Some(Target::Cloud {
            name,
            file: var("OS_CLIENT_CONFIG_FILE").map(PathBuf::from),
        })
    }

    /// Like [`Target::from_env`], but an error that says loudly why nothing ran: an `--ignored` run
    /// without a cloud must fail, never pass.
    pub fn real() -> Result<Target> {
        Target::from_env().context(
            "the real-cloud tier did NOT run: set KOS_E2E_CLOUD (or OS_CLOUD) to a clouds.yaml cloud, \
             e.g. `scripts/e2e-minicloud` or `KOS_E2E_CLOUD=mycloud cargo test -p kos-e2e -- --ignored`",
        )
    }

    /// Authenticates and gives a context with a fresh run prefix.
    pub async fn connect(&self) -> Result<Ctx> {
        match self {
            Target::Sim(cfg) => {
                let mut sim = Sim::start((**cfg).clone()).await?;
                // Its servers run their user_data: kos up checks the clusters they make.
                sim.attach_guests(std::sync::Arc::new(kos_guest::sim::SimGuests::new()?));
                let dir = tempfile::tempdir()?;
                let clouds = dir.path().join("clouds.yaml");
                std::fs::write(&clouds, sim.clouds_yaml(SIM_CLOUD))?;
                // Only the file written here is read: no HOME, no /etc/openstack.
                let env = Env::from_vars([("HOME", "/nonexistent")])
                    .with_system_dir(dir.path().join("no-etc"));
                let profile = CloudProfile::load(&env, Some(SIM_CLOUD), Some(&clouds))?;
                let session = Session::connect(&profile)
                    .await?
                    .with_retry_policy(RetryPolicy::fast());
                let every = Duration::from_secs_f64((cfg.time_scale * 2.0).clamp(0.005, 0.5));
                let cli = CliCloud {
                    name: SIM_CLOUD.into(),
                    file: Some(clouds),
                    isolated: true,
                    // Its guests run user_data (kos-guest): follow the markers and the API to Ready.
                    wait: "ready".into(),
                    timeout: Duration::from_secs(300),
                    // Its clusters' APIs at their floating IPs, as through a bastion's proxy.
                    proxy: Some(sim.proxy_url()),
                };
                Ok(Ctx::new(session, profile, every, cli, Some((sim, dir))))
            }
            Target::Cloud { name, file } => {
                let profile = CloudProfile::load(&Env::process(), Some(name), file.as_deref())
                    .with_context(|| format!("loading cloud {name:?} from clouds.yaml"))?;
                let session = Session::connect(&profile)
                    .await
                    .with_context(|| format!("connecting to cloud {name:?}"))?;
                let cli = CliCloud {
                    name: name.clone(),
                    file: file.clone(),
                    isolated: false,
                    wait: cli::real_cloud_wait()?,
                    timeout: Duration::from_secs(20 * 60),
                    proxy: None,
                };
                Ok(Ctx::new(
                    session,
                    profile,
                    Duration::from_millis(500),
                    cli,
                    None,
                ))
            }
        }
    }
}

/// One run's identity: every name starts with `prefix`, every taggable thing carries it as a tag.
#[derive(Debug, Clone)]
pub struct Run {
    pub prefix: String,
}

impl Run {
    pub fn new() -> Run {
        Run {
            prefix: format!("kos-e2e-{:08x}", rand::random::<u32>()),
        }
    }

    /// `<prefix>-<what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }

    /// The run's tag (valid for Neutron, Nova and Octavia).
    pub fn tag(&self) -> &str {
        &self.prefix
    }

    pub fn tags(&self) -> Vec<String> {
        vec![self.prefix.clone()]
    }

    pub fn query(&self) -> TagQuery {
        TagQuery::all([self.tag()])
    }

    /// A cluster name of this run, `e2e<random>-<what>` (a DNS label of at most 20 characters, so
    /// `what` has 8). Its objects, `kos-e2e<random>-<what>-…`, can never be mistaken for the run's own
    /// `kos-e2e-<random>-…` objects, nor the other way round; `kos down <cluster>` removes a killed run's.
    pub fn cluster(&self, what: &str) -> String {
        format!("e2e{}-{what}", &self.prefix["kos-e2e-".len()..])
    }
}

impl Default for Run {
    fn default() -> Self {
        Run::new()
    }
}

/// What a scenario gets: a session, the run, and how often to poll this target.
pub struct Ctx {
    pub session: Session,
    pub profile: CloudProfile,
    pub run: Run,
    /// Poll interval: short on the simulator (its clock is scaled), 0.5 s on a real cloud.
    pub every: Duration,
    /// How the `kos` CLI reaches this cloud.
    cli: CliCloud,
    kos: OnceCell<Kos>,
    sim: Option<(Sim, tempfile::TempDir)>,
    /// The calls whose Keystone access rules the CCM's and CSI's application credential carries
    /// (`addons.credentialAccessRules`); `None`: none, the credential may call anything.
    access_rules: Option<Vec<kos_cluster::access_rules::Call>>,
}

impl Ctx {
    fn new(
        session: Session,
        profile: CloudProfile,
        every: Duration,
        cli: CliCloud,
        sim: Option<(Sim, tempfile::TempDir)>,
    ) -> Ctx {
        Ctx {
            session,
            profile,
            run: Run::new(),
            every,
            cli,
            kos: OnceCell::new(),
            sim,
            access_rules: None,
        }
    }

    /// This context with the CCM's and CSI's credential restricted to the rules of `calls`, as
    /// `addons.credentialAccessRules: true` makes it (with `kos_cluster::access_rules::CALLS`).
    #[must_use]
    pub fn with_access_rules(mut self, calls: &[kos_cluster::access_rules::Call]) -> Ctx {
        self.access_rules = Some(calls.to_vec());
        self
    }

    /// The calls whose rules the CCM's and CSI's credential carries, if restricted.
    pub fn access_rules(&self) -> Option<&[kos_cluster::access_rules::Call]> {
        self.access_rules.as_deref()
    }

    /// The `kos` CLI on this cloud, with this scenario's own data directory.
    pub async fn kos(&self) -> Result<&Kos> {
        self.kos
            .get_or_try_init(|| Kos::new(self.cli.clone()))
            .await
    }

    /// A turn to run a cluster scenario: on a real cloud at most `KOS_E2E_CLUSTERS_AT_ONCE` (2) run at
    /// once, so their sum stays inside one project's quotas; the simulator is this scenario's own.
    pub async fn cluster_turn(&self) -> Result<Option<SemaphorePermit<'static>>> {
        static TURNS: OnceLock<Semaphore> = OnceLock::new();
        if self.is_sim() {
            return Ok(None);
        }
        let n = match std::env::var("KOS_E2E_CLUSTERS_AT_ONCE") {
            Ok(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("KOS_E2E_CLUSTERS_AT_ONCE={v:?}"))?,
            Err(_) => CLUSTERS_AT_ONCE,
        };
        let turns = TURNS.get_or_init(|| Semaphore::new(n));
        Ok(Some(turns.acquire().await?))
    }

    /// The in-process simulator, when this is the hermetic target.
    pub fn sim(&self) -> Option<&Sim> {
        self.sim.as_ref().map(|(s, _)| s)
    }

    pub fn is_sim(&self) -> bool {
        self.sim.is_some()
    }

    /// A profile like this one with a wrong password (for the bad-auth case).
    pub fn bad_password_profile(&self) -> Option<CloudProfile> {
        let mut p = self.profile.clone();
        match &mut p.auth {
            ProfileAuth::Password { password, .. } => {
                *password = "kos-e2e-wrong-password".to_owned().into();
                Some(p)
            }
            ProfileAuth::ApplicationCredential { .. } => None,
        }
    }

    /// Runs `body`, then the cleanup it registered (always), then checks nothing is left.
    /// The body's error comes first; cleanup errors are reported with it.
    pub async fn guarded<F>(&self, body: F) -> Result<()>
    where
        F: AsyncFnOnce(&mut Cleanup) -> Result<()>,
    {
        let mut made = Cleanup::default();
        let outcome = body(&mut made).await;
        let clusters = made.clusters();
        let cleaned = made.run(self).await;
        let left = match self.leftovers().await {
            Ok(mut l) => self.cluster_leftovers(&clusters).await.map(|c| {
                l.extend(c);
                l
            }),
            Err(e) => Err(e),
        };
        match (outcome, cleaned, left) {
            (Err(e), Ok(()), _) => Err(e),
            (Err(e), Err(c), _) => Err(e.context(format!("and cleanup failed: {c:#}"))),
            (Ok(()), Err(c), _) => Err(c.context("cleanup failed")),
            (Ok(()), Ok(()), Err(e)) => Err(e.context("listing leftovers")),
            (Ok(()), Ok(()), Ok(left)) if !left.is_empty() => {
                bail!("left behind after cleanup: {}", left.join(", "))
            }
            _ => Ok(()),
        }
    }

    /// Everything of `clusters` still on the cloud (see [`census`]).
    pub async fn cluster_leftovers(&self, clusters: &[String]) -> Result<Vec<String>> {
        let mut left = Vec::new();
        for c in clusters {
            let objs = census::census(&self.session, c).await?;
            left.extend(objs.0.iter().map(|o| format!("cluster {c}: {o}")));
        }
        Ok(left)
    }

    /// Everything carrying the run's tag, name prefix or metadata, as `kind name-or-id` (clusters are
    /// listed by [`Ctx::cluster_leftovers`]).
    pub async fn leftovers(&self) -> Result<Vec<String>> {
        let s = &self.session;
        let (net, q) = (s.network(), self.run.query());
        let mut left: Vec<String> = Vec::new();
        let mut add = |kind: &str, items: Vec<String>| {
            left.extend(items.into_iter().map(|i| format!("{kind} {i}")));
        };
        let tags = q.clone();
        add(
            "network",
            ids(
                net.list_networks(&NetworkFilter {
                    tags,
                    ..Default::default()
                })
                .await?,
                |n| &n.id,
            ),
        );
        let tags = q.clone();
        add(
            "subnet",
            ids(
                net.list_subnets(&SubnetFilter {
                    tags,
                    ..Default::default()
                })
                .await?,
                |n| &n.id,
            ),
        );
        let tags = q.clone();
        add(
            "router",
            ids(
                net.list_routers(&RouterFilter {
                    tags,
                    ..Default::default()
                })
                .await?,
                |n| &n.id,
            ),
        );
        let tags = q.clone();
        add(
            "port",
            ids(
                net.list_ports(&PortFilter {
                    tags,
                    ..Default::default()
                })
                .await?,
                |n| &n.id,
            ),
        );
        let tags = q.clone();
        let sgs = net
            .list_security_groups(&SecurityGroupFilter {
                tags,
                ..Default::default()
            })
            .await?;
        add("security group", ids(sgs, |n| &n.id));
        let tags = q.clone();
        let fips = net
            .list_floating_ips(&FloatingIpFilter {
                tags,
                ..Default::default()
            })
            .await?;
        add("floating ip", ids(fips, |n| &n.id));
        add(
            "server",
            ids(s.compute().list_servers(&q).await?, |n| &n.id),
        );
        let tags = q.clone();
        let lbs = s
            .load_balancer()
            .list_load_balancers(&LoadBalancerFilter {
                tags,
                ..Default::default()
            })
            .await?;
        add("load balancer", ids(lbs, |n| &n.id));
        let p = self.run.prefix.as_str();
        let named = |n: &str| n.starts_with(p);
        let kps = s.compute().list_keypairs().await?;
        add(
            "keypair",
            kps.into_iter()
                .map(|k| k.name)
                .filter(|n| named(n))
                .collect(),
        );
        let groups = s.compute().list_server_groups().await?;
        add(
            "server group",
            groups
                .into_iter()
                .map(|g| g.name)
                .filter(|n| named(n))
                .collect(),
        );
        let vols = s
            .block_storage()
            .list_volumes(&VolumeFilter {
                metadata: [(RUN_KEY.to_owned(), p.to_owned())].into(),
                ..Default::default()
            })
            .await?;
        add("volume", ids(vols, |v| &v.id));
        let creds = s.identity().list_application_credentials(None).await?;
        add(
            "application credential",
            creds
                .into_iter()
                .map(|c| c.name)
                .filter(|n| named(n))
                .collect(),
        );
        Ok(left)
    }

    /// The smallest flavor by RAM (what a fake hypervisor boots fastest and quotas allow).
    pub async fn flavor(&self) -> Result<Flavor> {
        let flavors = self.session.compute().list_flavors().await?;
        flavors
            .into_iter()
            .min_by_key(|f| (f.ram, f.vcpus))
            .context("the cloud offers no flavor")
    }

    /// `KOS_E2E_IMAGE`; on kos-sim its Ubuntu image (its guests run kos's bootstrap, and refuse an
    /// image without kubeadm as a real node does); else the smallest active image the project can see.
    pub async fn image(&self) -> Result<Image> {
        let img = self.session.image();
        if let Ok(name) = std::env::var("KOS_E2E_IMAGE") {
            return Ok(img.find_image_by_name_or_id(&name).await?);
        }
        if self.sim.is_some() {
            return Ok(img.find_image_by_name_or_id(SIM_NODE_IMAGE).await?);
        }
        let images = img.list_images(&ImageFilter::default()).await?;
        images
            .into_iter()
            .filter(|i| i.status.as_str() == "active")
            .min_by_key(|i| i.size.unwrap_or(u64::MAX))
            .context("the cloud offers no active image")
    }

    /// `KOS_E2E_EXTERNAL_NETWORK`, else the one external network.
    pub async fn external_network(&self) -> Result<Network> {
        let name = std::env::var("KOS_E2E_EXTERNAL_NETWORK").ok();
        Ok(self
            .session
            .network()
            .external_network(name.as_deref())
            .await?)
    }

    /// Polls `check` every [`Ctx::every`] until it gives `Some`, for at most [`WAIT`].
    pub async fn poll<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        let end = Instant::now() + WAIT;
        loop {
            if let Some(t) = check().await? {
                return Ok(t);
            }
            if Instant::now() >= end {
                bail!("timed out after {WAIT:?} waiting for {what}");
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// The deadline for one facade wait.
    pub fn deadline(&self) -> Instant {
        Instant::now() + WAIT
    }
}

/// The volume metadata key that carries the run (Cinder volumes have no tags).
pub const RUN_KEY: &str = "kos-e2e-run";

fn ids<T>(items: Vec<T>, id: impl Fn(&T) -> &String) -> Vec<String> {
    items.iter().map(|i| id(i).clone()).collect()
}
