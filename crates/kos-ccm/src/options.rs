//! The command line of `kos-ccm`: the upstream cloud-controller-manager's flags, so its manifests
//! work unchanged, plus a few of kos-ccm's own. Go-style `--flag=value` and `--flag value` both
//! work, as do Go durations (`5m`, `1h30m`) and `--leader-elect=false`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::semantics::parse_go_duration;

/// The controllers kos-ccm runs, by their upstream names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    /// `cloud-node`: initialises nodes (addresses, labels, providerID, the uninitialized taint).
    CloudNode,
    /// `cloud-node-lifecycle`: deletes nodes whose server is gone, taints shut-down ones.
    CloudNodeLifecycle,
    /// `service`: Services of type LoadBalancer on Octavia.
    Service,
    /// `route`: pod-CIDR routes on the router (only with `[Route] router-id`).
    Route,
}

impl Controller {
    pub const ALL: [Controller; 4] = [
        Controller::CloudNode,
        Controller::CloudNodeLifecycle,
        Controller::Service,
        Controller::Route,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Controller::CloudNode => "cloud-node",
            Controller::CloudNodeLifecycle => "cloud-node-lifecycle",
            Controller::Service => "service",
            Controller::Route => "route",
        }
    }

    fn parse(s: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The flags of a `kos-ccm` run (no subcommand), as given.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The cloud.conf (gcfg), as for the upstream CCM.
    #[arg(long, value_name = "FILE")]
    pub cloud_config: Option<PathBuf>,
    /// Accepted for compatibility; must be `openstack` (or `external`) when given.
    #[arg(long, value_name = "NAME")]
    pub cloud_provider: Option<String>,
    /// Names this cluster's load balancers; must be unique per project.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
    /// Controllers to run: `*` (all), names, or `-name` to leave one out.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Services reconciled at once (upstream defaults to 1; kos-ccm never blocks a worker).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrent_service_syncs: u16,
    /// How often every Service's load balancer is compared with the cloud and repaired.
    #[arg(long, default_value = "5m", value_parser = go_duration)]
    pub lb_resync_period: Duration,
    /// kos-ccm's own: how often every pool's members are listed even with no sign of a change
    /// (the deep verify; 0, the default, never). A resync lists a pool's members only when its
    /// member ids or its load balancer's `updated_at` changed, which every change through
    /// Octavia's API does; this finds the rest (a change made in the database). At least 1h:
    /// it costs one call per pool.
    #[arg(long, default_value = "0s", value_parser = go_duration)]
    pub lb_member_verify_period: Duration,
    /// How often node addresses and labels are refreshed.
    #[arg(long, default_value = "5m", value_parser = go_duration)]
    pub node_status_update_frequency: Duration,
    /// How often NotReady nodes are checked against their servers.
    #[arg(long, default_value = "5s", value_parser = go_duration)]
    pub node_monitor_period: Duration,
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub route_reconciliation_period: Duration,
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub configure_cloud_routes: bool,
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allocate_node_cidrs: bool,
    /// The pod CIDR (routes are only managed inside it).
    #[arg(long, value_name = "CIDR")]
    pub cluster_cidr: Option<ipnet::IpNet>,
    /// Out-of-cluster access; in a pod the service account is used.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Overrides the API server address of the kubeconfig.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub leader_elect_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub leader_elect_retry_period: Duration,
    /// Only `leases` is supported.
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,
    #[arg(long, default_value = "cloud-controller-manager")]
    pub leader_elect_resource_name: String,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// Address of /healthz and /metrics. Loopback unless told otherwise: they are plain HTTP
    /// without authentication (upstream serves HTTPS with delegated authorisation on all
    /// addresses), and with hostNetwork anything that reaches the node would read them.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Port of /healthz and /metrics (plain HTTP; 0 turns them off).
    #[arg(long, default_value_t = 10258)]
    pub secure_port: u16,
    /// Log verbosity as in klog: 0-1 info, 2-3 debug, 4+ trace (RUST_LOG wins when set).
    #[arg(long = "v", default_value_t = 1)]
    pub verbosity: u8,
    /// Accepted for compatibility (kos-ccm always uses its own service account).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub use_service_account_credentials: Option<bool>,
    /// Accepted for compatibility; unused.
    #[arg(long, value_name = "FILE")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// Accepted for compatibility; unused.
    #[arg(long, value_name = "FILE")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// Accepted for compatibility; unused.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub authentication_skip_lookup: Option<bool>,
    /// Added to the User-Agent of OpenStack calls (repeatable).
    #[arg(long, value_name = "AGENT")]
    pub user_agent: Vec<String>,
    /// How long one OpenStack API request may take (upstream uses the 60 s metadata timeout).
    #[arg(long, default_value = "30s", value_parser = go_duration)]
    pub openstack_api_timeout: Duration,
    /// Client-side limit on OpenStack requests per second (0: none).
    #[arg(long, default_value_t = 20.0)]
    pub openstack_rate_limit: f64,
    /// Requests allowed back to back under the rate limit.
    #[arg(long, default_value_t = 40)]
    pub openstack_rate_burst: u32,
}

fn go_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| e.to_string())
}

/// What the flags mean once checked.
#[derive(Debug, Clone)]
pub struct Options {
    pub cloud_config: PathBuf,
    pub cluster_name: String,
    pub controllers: BTreeSet<Controller>,
    pub concurrent_service_syncs: usize,
    pub lb_resync_period: Duration,
    /// `None`: no deep verify of members.
    pub lb_member_verify_period: Option<Duration>,
    pub node_status_update_frequency: Duration,
    pub node_monitor_period: Duration,
    pub route_reconciliation_period: Duration,
    pub configure_cloud_routes: bool,
    pub cluster_cidr: Option<ipnet::IpNet>,
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    /// `None`: `--leader-elect=false`.
    pub leader_election: Option<LeaderElection>,
    /// `None`: `--secure-port=0`.
    pub serve_on: Option<std::net::SocketAddr>,
    pub verbosity: u8,
    pub openstack_api_timeout: Duration,
    pub openstack_rate_limit: f64,
    pub openstack_rate_burst: u32,
}

#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    pub lease_duration: Duration,
    /// Renew this long before the lease runs out: lease duration minus renew deadline.
    pub renew_margin: Duration,
    /// How often a standby looks for a released Lease (`--leader-elect-retry-period`).
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("--cloud-config is required: the cloud.conf the upstream CCM reads")]
    NoCloudConfig,
    #[error("--cloud-provider={0}: kos-ccm is the `openstack` cloud provider")]
    CloudProvider(String),
    #[error(
        "--controllers: unknown controller `{0}` (known: *, cloud-node, cloud-node-lifecycle, service, route)"
    )]
    UnknownController(String),
    #[error("--cluster-name must not be empty: it names the load balancers")]
    EmptyClusterName,
    #[error(
        "--leader-elect-resource-lock={0}: only `leases` is supported (endpoints and configmaps locks were removed from Kubernetes)"
    )]
    ResourceLock(String),
    #[error(
        "--leader-elect-renew-deadline ({renew:?}) must be shorter than --leader-elect-lease-duration ({lease:?})"
    )]
    RenewDeadline { renew: Duration, lease: Duration },
    #[error(
        "--lb-member-verify-period ({0:?}) must be 0 (off) or at least 1h: each one lists the members of every pool"
    )]
    MemberVerifyPeriod(Duration),
}

/// The shortest deep-verify period: one member list per pool each time.
const MIN_MEMBER_VERIFY: Duration = Duration::from_secs(3600);

impl RunArgs {
    pub fn check(&self) -> Result<Options, OptionsError> {
        let cloud_config = self
            .cloud_config
            .clone()
            .ok_or(OptionsError::NoCloudConfig)?;
        if let Some(p) = &self.cloud_provider
            && !matches!(p.as_str(), "openstack" | "external")
        {
            return Err(OptionsError::CloudProvider(p.clone()));
        }
        if self.cluster_name.trim().is_empty() {
            return Err(OptionsError::EmptyClusterName);
        }
        let controllers = controllers(&self.controllers)?;
        let verify = self.lb_member_verify_period;
        if !verify.is_zero() && verify < MIN_MEMBER_VERIFY {
            return Err(OptionsError::MemberVerifyPeriod(verify));
        }
        let leader_election = if self.leader_elect {
            if self.leader_elect_resource_lock != "leases" {
                return Err(OptionsError::ResourceLock(
                    self.leader_elect_resource_lock.clone(),
                ));
            }
            if self.leader_elect_renew_deadline >= self.leader_elect_lease_duration {
                return Err(OptionsError::RenewDeadline {
                    renew: self.leader_elect_renew_deadline,
                    lease: self.leader_elect_lease_duration,
                });
            }
            Some(LeaderElection {
                namespace: self.leader_elect_resource_namespace.clone(),
                name: self.leader_elect_resource_name.clone(),
                lease_duration: self.leader_elect_lease_duration,
                renew_margin: self.leader_elect_lease_duration - self.leader_elect_renew_deadline,
                retry_period: self.leader_elect_retry_period,
            })
        } else {
            None
        };
        Ok(Options {
            cloud_config,
            cluster_name: self.cluster_name.clone(),
            controllers,
            concurrent_service_syncs: usize::from(self.concurrent_service_syncs),
            lb_resync_period: self.lb_resync_period,
            lb_member_verify_period: (!verify.is_zero()).then_some(verify),
            node_status_update_frequency: self.node_status_update_frequency,
            node_monitor_period: self.node_monitor_period,
            route_reconciliation_period: self.route_reconciliation_period,
            configure_cloud_routes: self.configure_cloud_routes,
            cluster_cidr: self.cluster_cidr,
            kubeconfig: self.kubeconfig.clone(),
            master: self.master.clone(),
            leader_election,
            serve_on: (self.secure_port != 0)
                .then(|| std::net::SocketAddr::new(self.bind_address, self.secure_port)),
            verbosity: self.verbosity,
            openstack_api_timeout: self.openstack_api_timeout,
            openstack_rate_limit: self.openstack_rate_limit,
            openstack_rate_burst: self.openstack_rate_burst,
        })
    }
}

/// Upstream's rules: `*` is every default controller; `name` adds one; `-name` removes one.
fn controllers(given: &[String]) -> Result<BTreeSet<Controller>, OptionsError> {
    let mut on = BTreeSet::new();
    let mut off = BTreeSet::new();
    for raw in given {
        let s = raw.trim();
        if s.is_empty() {
            continue;
        }
        if s == "*" {
            on.extend(Controller::ALL);
            continue;
        }
        let (set, name) = match s.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, s),
        };
        let c = Controller::parse(name).ok_or_else(|| OptionsError::UnknownController(s.into()))?;
        set.insert(c);
    }
    Ok(on.difference(&off).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<Options, String> {
        let cli = Cli::try_parse_from(std::iter::once("kos-ccm").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.run.check().map_err(|e| e.to_string())
    }

    #[test]
    fn the_upstream_manifests_flags_parse() {
        // The args of the upstream DaemonSet (and of kos's own manifest).
        let o = parse(&[
            "--v=1",
            "--cluster-name=prod",
            "--cloud-config=/etc/config/cloud.conf",
            "--cloud-provider=openstack",
            "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1",
        ])
        .expect("parses");
        assert_eq!(o.cluster_name, "prod");
        assert_eq!(o.controllers.len(), 4);
        assert_eq!(o.serve_on, Some("127.0.0.1:10258".parse().expect("addr")));
        assert_eq!(o.concurrent_service_syncs, 8);
        let le = o.leader_election.expect("on by default");
        assert_eq!(
            (le.namespace.as_str(), le.name.as_str()),
            ("kube-system", "cloud-controller-manager")
        );
        assert_eq!(le.renew_margin, Duration::from_secs(5));
    }

    #[test]
    fn health_and_metrics_stay_on_loopback_unless_told() {
        let o = parse(&["--cloud-config=c.conf"]).expect("parses");
        assert_eq!(o.serve_on, Some("127.0.0.1:10258".parse().expect("addr")));
    }

    #[test]
    fn go_style_values() {
        let o = parse(&[
            "--cloud-config",
            "c.conf",
            "--leader-elect=false",
            "--lb-resync-period=1m30s",
            "--controllers=*,-route",
            "--secure-port=0",
        ])
        .expect("parses");
        assert!(o.leader_election.is_none());
        assert_eq!(o.lb_resync_period, Duration::from_secs(90));
        assert!(!o.controllers.contains(&Controller::Route));
        assert!(o.controllers.contains(&Controller::Service));
        assert!(o.serve_on.is_none());
        assert_eq!(o.lb_member_verify_period, None, "no deep verify by default");
        let o = parse(&["--cloud-config=c", "--lb-member-verify-period=2h"]).expect("ok");
        assert_eq!(o.lb_member_verify_period, Some(Duration::from_secs(7200)));
        let o = parse(&["--cloud-config=c", "--controllers=service,cloud-node"]).expect("ok");
        assert_eq!(
            o.controllers.into_iter().collect::<Vec<_>>(),
            [Controller::CloudNode, Controller::Service]
        );
    }

    #[test]
    fn bad_flags_say_what_to_do() {
        for (args, want) in [
            (vec![], "--cloud-config is required"),
            (
                vec!["--cloud-config=c", "--controllers=nodes"],
                "unknown controller `nodes`",
            ),
            (
                vec!["--cloud-config=c", "--cloud-provider=aws"],
                "`openstack` cloud provider",
            ),
            (
                vec!["--cloud-config=c", "--cluster-name="],
                "must not be empty",
            ),
            (
                vec!["--cloud-config=c", "--leader-elect-resource-lock=endpoints"],
                "only `leases`",
            ),
            (
                vec!["--cloud-config=c", "--leader-elect-renew-deadline=20s"],
                "must be shorter",
            ),
            (vec!["--cloud-config=c", "--lb-resync-period=soon"], "soon"),
            (
                vec!["--cloud-config=c", "--lb-member-verify-period=10m"],
                "at least 1h",
            ),
        ] {
            let e = parse(&args).expect_err(want);
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }
}
