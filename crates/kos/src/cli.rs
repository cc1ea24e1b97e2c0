//! Command-line interface definition.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kos_cluster::names::ClusterName;

/// A cluster NAME as the spec's `metadata.name` allows it: checked before anything else runs, since
/// it names cloud resources and a directory of this machine.
fn cluster_name(s: &str) -> Result<ClusterName, String> {
    ClusterName::new(s).map_err(|e| {
        format!(
            "{e}; a cluster name is the spec's metadata.name: lowercase letters, digits and `-`, at most {} \
             characters, starting and ending with a letter or digit",
            kos_cluster::names::CLUSTER_NAME_MAX
        )
    })
}

#[derive(Debug, Parser)]
#[command(
    name = "kos",
    version,
    about = "Kubernetes on OpenStack",
    propagate_version = true
)]
pub struct Cli {
    /// More log output (-v, -vv). RUST_LOG overrides. The SDK logs every URL at info, so it stays at
    /// warn below -vv.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what `up` would create, change or delete (nothing is changed).
    Plan(PlanArgs),
    /// Create the cluster, or converge it to the spec (re-run after any failure).
    Up(UpArgs),
    /// Delete a cluster: everything tagged for it and what it made at run time (LBs, FIPs, volumes).
    Down(DownArgs),
    /// Every resource of a cluster with its state, the API endpoint, and what is not converged.
    Status(StatusArgs),
    /// List (and with --delete remove) resources of clusters that no longer exist.
    Gc(GcArgs),
    /// Check, by Neutron's and Octavia's rules, that every flow the cluster needs gets through, and
    /// say which rule lets each in or what is missing (exit 2 when one is blocked).
    Doctor(DoctorArgs),
    /// Everything the nodes fetch (packages, manifests, images): as fetched after the spec's
    /// mirrors, as published, with pinned checksums; to fill a mirror from (no cloud contacted).
    Artefacts(ArtefactsArgs),
    /// Write an admin kubeconfig for a cluster, signed offline with its CA (or merge it into yours).
    Kubeconfig(KubeconfigArgs),
    /// Move a cluster `kos up` made under kos-operator: its Cluster and its records into the
    /// management cluster (KUBECONFIG), then its files off this machine. No server is touched.
    Export(ExportArgs),
    /// Take a cluster back from kos-operator: its records onto this machine, its spec into a file,
    /// the Cluster let go without tearing anything down. No server is touched.
    Adopt(AdoptArgs),
    /// Write a cluster's secrets (CAs, keys, credential, encryption keys) to a file sealed with a
    /// passphrase: what `kos restore` takes the cluster on again from, whatever was lost.
    Backup(BackupArgs),
    /// Put a `kos backup`'s secrets back on this machine, so that `kos up` continues the cluster.
    /// Nothing is written over secrets that differ.
    Restore(RestoreArgs),
    /// Replace a running cluster's credentials without interrupting it.
    Rotate {
        #[command(subcommand)]
        command: RotateCommand,
    },
    /// The simulated OpenStack cloud (for demos, tests and benchmarks).
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// Benchmarks on a simulated cloud: measured figures, never a pass or fail.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Debug, Args)]
pub struct CloudArgs {
    /// Cloud from clouds.yaml (default: OS_CLOUD, else the OS_* variables); `sim` for the embedded
    /// simulated cloud, kept under the data directory between runs.
    #[arg(long, env = "OS_CLOUD")]
    pub cloud: Option<String>,
}

#[derive(Debug, Args)]
pub struct SpecArgs {
    /// The cluster spec.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Print the desired dependency graph in Graphviz dot instead.
    #[arg(long, value_name = "FORMAT", value_parser = ["dot"])]
    pub graph: Option<String>,
    /// Show unchanged resources too.
    #[arg(long)]
    pub all: bool,
    /// Exit 2 when the plan has changes (0: nothing to do).
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Plan as `kos up --renew-certificates` would: every control plane replaced.
    #[arg(long)]
    pub renew_certificates: bool,
}

#[derive(Debug, Args)]
pub struct ArtefactsArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// How many cloud operations run at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub parallelism: u16,
    /// Create a new CCM application credential if the stored secret was lost.
    #[arg(long)]
    pub recreate_ccm_credential: bool,
    /// Make the cluster with the secrets stored on this machine even though the cloud shows nothing
    /// of the cluster they were made for (restoring a deleted cluster's CA on purpose).
    #[arg(long)]
    pub reuse_local_secrets: bool,
    /// How far to follow the cluster once its cloud resources exist.
    #[arg(long, value_enum, default_value_t)]
    pub wait: Wait,
    /// Also replace nodes their group's `healthCheck` finds unhealthy (drained, a control plane's
    /// etcd member removed first), as Cluster API's MachineHealthCheck does: by default Ready False
    /// or Unknown for more than 5 minutes, and nothing while more of the group than its
    /// `maxUnhealthy` is unhealthy. Servers in ERROR or gone are always made again.
    #[arg(long)]
    pub repair: bool,
    /// How long draining one node may take before the run stops, in seconds (a PodDisruptionBudget
    /// that allows no eviction holds it), as Cluster API's nodeDrainTimeout.
    #[arg(long, default_value_t = 600)]
    pub drain_timeout: u64,
    /// How long a node may be NotReady before --repair replaces it, in seconds, for every group
    /// (instead of the timeouts of the spec's `healthCheck`, 300 s by default).
    #[arg(long, requires = "repair")]
    pub repair_after: Option<u64>,
    /// Replace every control plane made before this run, one at a time, as when its kubeadm
    /// certificates have less than 30 days left (which `kos up` does on its own): the new ones get new
    /// certificates.
    #[arg(long)]
    pub renew_certificates: bool,
    /// `json`: stdout carries one JSON document at the end, the run's outcome (changes, API
    /// endpoint, each node's bootstrap, nodes Ready, the error and its help); progress stays on
    /// stderr.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub hosting: SelfHostArgs,
}

/// `kos up --self-hosted`: once Ready, the cluster keeps itself.
#[derive(Debug, Args)]
pub struct SelfHostArgs {
    /// Once the cluster is Ready, it keeps itself, as `kos export --self-hosted` makes it: the
    /// clouds.yaml of --identity-file is written into it as Secret
    /// kos-system/<--identity-secret>, kos-operator (of --operator-image) is installed on its
    /// control planes, and its records move there from this machine. `kos adopt NAME --kubeconfig
    /// <its kubeconfig> --namespace kos-system` brings it back.
    #[arg(long, requires_all = ["operator_image", "identity_file", "identity_cloud"])]
    pub self_hosted: bool,
    /// kos-operator's image, for --self-hosted.
    #[arg(long, value_name = "IMAGE", requires = "self_hosted")]
    pub operator_image: Option<String>,
    /// The clouds.yaml kos-operator reaches the cloud with from inside the cluster, for
    /// --self-hosted (an application credential of the project is the least it needs); a
    /// `cacert` it names goes into the Secret too.
    #[arg(long, value_name = "FILE", requires = "self_hosted")]
    pub identity_file: Option<PathBuf>,
    /// The cloud's name in --identity-file.
    #[arg(long, value_name = "CLOUD", requires = "self_hosted")]
    pub identity_cloud: Option<String>,
    /// The Secret in kos-system the identity is written to, for --self-hosted.
    #[arg(long, value_name = "SECRET", default_value = "kos-identity")]
    pub identity_secret: String,
}

/// How far `kos up` follows a cluster after the infrastructure is converged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Wait {
    /// Stop once every resource exists and the servers are ACTIVE (images without cloud-init, or
    /// following the bootstrap elsewhere).
    Infra,
    /// Also wait for every new node's bootstrap markers on its console.
    Bootstrap,
    /// Also wait for the Kubernetes API and every node Ready, when the API answers from here.
    #[default]
    Ready,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// List what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete this machine's secrets of the cluster when the cloud shows nothing of it (kept
    /// otherwise: a wrong project or region must not cost a live cluster its CA).
    #[arg(long)]
    pub forget: bool,
    /// `json`: one object with what was (or would be) deleted and what happened to local data.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// The cluster's spec: also report what is not converged to it.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// The cluster's spec: its CNI (whose traffic is checked only then) and who must reach the API.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// Only the orphans of this cluster (repeatable; default: every cluster's).
    #[arg(long = "cluster", value_name = "NAME", value_parser = cluster_name)]
    pub clusters: Vec<ClusterName>,
    /// Delete the orphans (default: only list them).
    #[arg(long)]
    pub delete: bool,
    /// `json`: one object with the orphans and whether they were deleted.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct KubeconfigArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// Where to write it (default: ./kubeconfig-<name>).
    #[arg(short, long, value_name = "FILE", conflicts_with = "merge")]
    pub output: Option<PathBuf>,
    /// Merge it into the first file of KUBECONFIG (default ~/.kube/config) as context kos-<name>.
    #[arg(long)]
    pub merge: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// The management cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE", conflicts_with = "self_hosted")]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace the Cluster goes into (default: `default`; self-hosted: `kos-system`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The cluster keeps itself: kos-operator (of --operator-image) is installed into the cluster,
    /// on its control planes, and the Cluster and its records go there. The identity Secret must
    /// be in the cluster first.
    #[arg(long, requires = "operator_image")]
    pub self_hosted: bool,
    /// kos-operator's image, for --self-hosted.
    #[arg(long, value_name = "IMAGE")]
    pub operator_image: Option<String>,
    /// The Secret (in that namespace) whose `clouds.yaml` kos-operator reaches the cloud with.
    #[arg(long, value_name = "SECRET")]
    pub identity_secret: String,
    /// The cloud's name in that clouds.yaml.
    #[arg(long, value_name = "CLOUD")]
    pub identity_cloud: String,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The cluster's name (the Cluster's metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// The management cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The Cluster's namespace.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Where the cluster's spec is written for `kos up -f` (default: ./<name>.yaml; never
    /// overwritten).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Where a backup's passphrase comes from.
#[derive(Debug, Args)]
pub struct PassphraseArgs {
    /// A file holding the passphrase (its first line); default: KOS_BACKUP_PASSPHRASE.
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// Back up the cluster kos-operator keeps in this namespace (its Secret `<name>-kos`, read
    /// through --kubeconfig) instead of this machine's.
    #[arg(long)]
    pub namespace: Option<String>,
    /// The management cluster's kubeconfig, with --namespace (default: KUBECONFIG).
    #[arg(long, value_name = "FILE", requires = "namespace")]
    pub kubeconfig: Option<PathBuf>,
    /// Where to write it (default: ./<name>.kos-backup; never overwritten).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub passphrase: PassphraseArgs,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The file `kos backup` wrote.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub cloud: CloudArgs,
    #[command(flatten)]
    pub passphrase: PassphraseArgs,
}

#[derive(Debug, Subcommand)]
pub enum RotateCommand {
    /// A new application credential for the cloud controller and CSI: put into the cluster's
    /// cloud-config Secret, rolled out to every workload that mounts it, then the old one deleted.
    /// Run it again after an interruption: it continues.
    Credential(RotateCredentialArgs),
    /// A new key for the Secrets' encryption at rest, put in place as upstream documents it: added
    /// on every control plane, made first, every Secret written again under it, the old key
    /// dropped (control planes are replaced three times). Run it again, or `kos up`, after an
    /// interruption: it continues.
    EncryptionKey(RotateEncryptionKeyArgs),
}

#[derive(Debug, Args)]
pub struct RotateEncryptionKeyArgs {
    /// The cluster's name (metadata.name; it must be the spec's).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    /// What `kos up` takes: the spec (-f) and its options, for the control planes' replacements.
    #[command(flatten)]
    pub up: UpArgs,
}

#[derive(Debug, Args)]
pub struct RotateCredentialArgs {
    /// The cluster's name (metadata.name).
    #[arg(value_parser = cluster_name)]
    pub name: ClusterName,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// How long to wait for the workloads to run on the new credential (seconds) before giving up
    /// and keeping the old one.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub timeout: u64,
    /// How long the new credential lives (days, 7-365): the spec's addons.credentialLifetimeDays.
    #[arg(long, default_value_t = kos_cluster::credential::DEFAULT_LIFETIME_DAYS,
          value_parser = clap::value_parser!(u32).range(7..=365), value_name = "DAYS")]
    pub lifetime_days: u32,
    /// `json`: one JSON document on stdout at the end, the credential now in use (never its
    /// secret), or the error and its help.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Serve a simulated OpenStack cloud on 127.0.0.1 and write a clouds.yaml for it.
    Serve(SimServeArgs),
}

#[derive(Debug, Args)]
pub struct SimServeArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Port on 127.0.0.1 of the CONNECT proxy into the clusters' API endpoints, for `HTTPS_PROXY`
    /// (overrides the config file's `proxy_port`; 0 picks a free one).
    #[arg(long)]
    pub proxy_port: Option<u16>,
    /// Simulator config (YAML: time_scale, latency, faults, rate_limits, quotas, ...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where to write the clouds.yaml (cloud name `sim`).
    #[arg(long, value_name = "PATH", default_value = "clouds.yaml")]
    pub clouds_yaml: PathBuf,
    /// Real seconds per simulated second (overrides the config file; 1 = real time).
    #[arg(long)]
    pub time_scale: Option<f64>,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Time `up` from zero on a simulated cloud with a realistic latency model, against the
    /// critical-path lower bound, with API calls per service (and baselines with --baselines).
    Apply(BenchApplyArgs),
    /// kos-ccm's Service controller at scale on a simulated cloud with realistic load-balancer
    /// provisioning times, in its own process: time until every Service has an address against
    /// one load balancer's provisioning (the floor) and a one-at-a-time, blocking baseline (the
    /// upstream's), calls per resync and per node join, the controller's peak RSS and CPU.
    Ccm(BenchCcmArgs),
    /// kos-csi's controller when many claims are created at once, on a simulated cloud with
    /// Cinder's realistic create time: time until every claim is Bound and until every volume is
    /// available, against one volume's create; Cinder calls meanwhile and per resync.
    Csi(BenchCsiArgs),
    /// kos-operator with a fleet on one simulated cloud, the real binary in its own process:
    /// time until every Cluster is Ready, then one idle resync interval's cloud calls per cluster
    /// by operation, the operator's peak RSS and idle CPU, beside the goals of issue 22.
    Operator(BenchOperatorArgs),
    /// kos-operator's reaction on a simulated cloud with realistic latency: a scale-up from zero
    /// asked for as cluster-autoscaler asks, and a node found dead, each against its floor (one
    /// boot and join; the health check's window and one boot and join).
    Autoscale(BenchAutoscaleArgs),
    /// The controller process of `bench ccm` (it starts this itself; reads its spec on stdin).
    #[command(hide = true)]
    CcmController,
}

#[derive(Debug, Args)]
pub struct BenchCsiArgs {
    /// Claims (PersistentVolumeClaims) created at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub claims: u32,
    /// CreateVolume calls in flight at most (the external-provisioner's --worker-threads).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub workers: u32,
    /// Real seconds per cloud second, as the other benches. Faster clocks inflate the figures:
    /// the CPU time of the calls is real time (see docs/benchmarks.md).
    #[arg(long, default_value_t = crate::cmd::bench::DEFAULT_TIME_SCALE)]
    pub time_scale: f64,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct BenchAutoscaleArgs {
    /// Real seconds per cloud second, as the other benches.
    #[arg(long, default_value_t = crate::cmd::bench::DEFAULT_TIME_SCALE)]
    pub time_scale: f64,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct BenchOperatorArgs {
    /// Clusters (one control plane each), created at once.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clusters: u32,
    /// Real seconds per cloud second, as the other benches.
    #[arg(long, default_value_t = crate::cmd::bench::DEFAULT_TIME_SCALE)]
    pub time_scale: f64,
    /// The operator's resync period, in cloud seconds (its flag takes whole real seconds: the
    /// period is rounded to one); the idle interval measured is one period.
    #[arg(long, default_value_t = 60.0)]
    pub resync_period: f64,
    /// The operator's --max-runs-per-project (its default is 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_runs_per_project: u32,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct BenchCcmArgs {
    /// Services of type LoadBalancer, created at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub services: u32,
    /// Nodes (members of every pool).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub nodes: u32,
    /// Services reconciled at once (kos-ccm's --concurrent-service-syncs).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Real seconds per cloud second. Faster clocks inflate kos-ccm's figure: the CPU time of its
    /// passes is real time (see docs/benchmarks.md).
    #[arg(long, default_value_t = crate::cmd::bench::DEFAULT_TIME_SCALE)]
    pub time_scale: f64,
    /// Skip the one-at-a-time baseline (it takes a minute or more).
    #[arg(long)]
    pub no_baseline: bool,
    /// Cloud seconds between the lists of load balancers' states while a Service waits on one
    /// in PENDING_* (kos-ccm's default: 1); 0 leaves only the passes' requeues, as before it.
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub pending_poll: f64,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct BenchApplyArgs {
    /// Control planes (1, 3 or 5), behind an Octavia load balancer.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub control_planes: u32,
    /// Workers, in one node pool.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub workers: u32,
    /// Requests per second each service accepts, in cloud time (0: no limit).
    #[arg(long, default_value_t = 50.0)]
    pub rate_limit: f64,
    /// Real seconds per cloud second.
    #[arg(long, default_value_t = crate::cmd::bench::DEFAULT_TIME_SCALE)]
    pub time_scale: f64,
    /// Also run the baselines on fresh clouds: sequential, and Terraform-like.
    #[arg(long)]
    pub baselines: bool,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}
