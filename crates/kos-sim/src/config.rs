//! Simulator configuration: identities, the time and latency model, faults and rate limits.
//! Loadable from a YAML file (`kos sim serve --config FILE`); every field has a default.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::faults::FaultRule;
use crate::service::Service;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Real seconds per cloud second. 1.0 is real time; tests use ~0.001.
    pub time_scale: f64,
    /// The CONNECT proxy's port on 127.0.0.1 (0 picks a free one): a fixed one lets a user export
    /// `HTTPS_PROXY` before the simulator has said where it listens.
    pub proxy_port: u16,
    pub latency: LatencyModel,
    /// Lifetime of an issued Keystone token, in cloud seconds.
    pub token_lifetime_secs: f64,
    pub region: String,
    pub project: String,
    pub username: String,
    pub password: String,
    /// The user's roles on the project; Keystone adds what they imply (admin → member → reader).
    pub user_roles: Vec<String>,
    /// Number of (fake) compute hosts: bounds anti-affinity groups and NoValidHost.
    pub compute_hosts: u32,
    /// Capacity of each compute host.
    pub host_vcpus: u32,
    pub host_ram_mb: u64,
    /// Compute availability zones; hosts are spread over them round-robin.
    pub zones: Vec<String>,
    /// Cinder's availability zones, which real clouds often name apart from Nova's (one `nova` volume
    /// zone under `az1`, `az2`, `az3`). Empty: the same names as `zones`.
    pub volume_zones: Vec<String>,
    /// Nova's scheduler: its reschedule limit, and the race of boots into one anti-affinity group.
    pub scheduler: SchedulerModel,
    /// Cinder's volume types besides `__DEFAULT__` (which Cinder always has), as an admin made them.
    pub volume_types: Vec<VolumeTypeConfig>,
    /// Nova's `[cinder] cross_az_attach` (default true). False: Nova refuses to attach a volume whose
    /// Cinder zone is not its server's compute zone.
    pub cross_az_attach: bool,
    /// Nova's `[compute] max_disk_devices_to_attach`: disks (the root disk counted) a server may
    /// have; -1 (the default) is unlimited.
    pub max_disk_devices_to_attach: i64,
    /// Seed devstack's project network too: `private` (10.10.0.0/24 on `private-subnet`) behind
    /// `router1` on the external network, for specs that bring their own network.
    pub project_network: bool,
    /// Neutron's ML2 extension driver `tag_ports_during_bulk_creation` (extension
    /// `tag-ports-during-bulk-creation`): the `tags` of a port POST, single or bulk, are kept. Off (the
    /// default, as devstack and minicloud run), they are validated and ignored, as real Neutron does.
    pub neutron_port_tags_on_create: bool,
    pub quotas: Quotas,
    pub faults: Vec<FaultRule>,
    /// Requests per second per service; above it the service answers 429 with Retry-After.
    pub rate_limits: BTreeMap<Service, f64>,
    /// Seed for every random choice (fault probabilities, jitter), so runs are repeatable.
    pub seed: u64,
    /// Services whose keystonemiddleware has no `[keystone_authtoken] service_type`: they refuse
    /// (401) every token of an application credential with access rules. Empty (the default): every
    /// service knows its catalog type and checks the rules. Keystone always knows its own.
    pub no_service_type: Vec<Service>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            time_scale: 1.0,
            proxy_port: 0,
            latency: LatencyModel::default(),
            token_lifetime_secs: 3600.0,
            region: "RegionOne".into(),
            project: "demo".into(),
            username: "demo".into(),
            password: "kos-sim-password".into(),
            user_roles: ["member", "load-balancer_member", "creator"]
                .map(str::to_owned)
                .to_vec(),
            compute_hosts: 3,
            host_vcpus: 64,
            host_ram_mb: 262_144,
            zones: vec!["nova".into()],
            volume_zones: Vec::new(),
            scheduler: SchedulerModel::default(),
            volume_types: VolumeTypeConfig::defaults(),
            cross_az_attach: true,
            max_disk_devices_to_attach: -1,
            project_network: false,
            neutron_port_tags_on_create: false,
            quotas: Quotas::default(),
            faults: Vec::new(),
            rate_limits: BTreeMap::new(),
            seed: 0,
            no_service_type: Vec::new(),
        }
    }
}

impl SimConfig {
    /// A config for tests: everything happens ~1000x faster than on a real cloud. Tokens still last
    /// hours of real time (an hour of cloud time would be 3.6 real seconds: a slow, loaded machine
    /// would see 401s mid-test); tests that want expiry use `POST /_sim/tokens/expire`.
    pub fn fast() -> Self {
        SimConfig {
            time_scale: 0.001,
            latency: LatencyModel::instant(),
            token_lifetime_secs: 1e7,
            ..Default::default()
        }
    }

    /// The cloud a newcomer tries kos on (`--cloud sim`, `kos sim serve`): a project of a typical public
    /// cloud rather than a bare devstack: three zones of two hosts each, devstack's project network,
    /// and room for the HA example (devstack's default quotas fit only the minimal one).
    pub fn demo() -> Self {
        SimConfig {
            compute_hosts: 6,
            zones: vec!["az1".into(), "az2".into(), "az3".into()],
            project_network: true,
            quotas: Quotas {
                instances: 40,
                cores: 160,
                ram_mb: 327_680,
                server_group_members: 40,
                security_groups: 20,
                security_group_rules: 200,
                volumes: 40,
                gigabytes: 4_000,
                ..Quotas::default()
            },
            ..Default::default()
        }
    }

    pub fn from_yaml_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read(path.display().to_string(), e))?;
        serde_saphyr::from_str(&text)
            .map_err(|e| ConfigError::Parse(path.display().to_string(), e.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read simulator config {0}: {1}")]
    Read(String, #[source] std::io::Error),
    #[error("invalid simulator config {0}: {1}")]
    Parse(String, String),
}

/// A volume type an admin made (`openstack volume type create --property k=v NAME`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeTypeConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// e.g. `volume_backend_name: ssd`, `multiattach: "<is> True"` (the only value that makes
    /// Cinder's volumes of the type multi-attachable).
    #[serde(default)]
    pub extra_specs: BTreeMap<String, String>,
}

impl VolumeTypeConfig {
    /// `ssd` (a backend of its own) and `multiattach`, beside Cinder's `__DEFAULT__`.
    pub fn defaults() -> Vec<VolumeTypeConfig> {
        let spec = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        vec![
            VolumeTypeConfig {
                name: "ssd".into(),
                description: "Solid-state volumes".into(),
                extra_specs: [spec("volume_backend_name", "ssd")].into(),
            },
            VolumeTypeConfig {
                name: "multiattach".into(),
                description: "Volumes more than one server may attach".into(),
                extra_specs: [
                    spec("volume_backend_name", "lvmdriver-1"),
                    spec("multiattach", "<is> True"),
                ]
                .into(),
            },
        ]
    }
}

/// Durations in cloud seconds. Defaults are what a healthy public cloud shows. `PUT /_sim/latency`
/// changes them while the simulator runs (a cloud that turns slow under load).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyModel {
    /// Added to every API call.
    pub per_call_secs: f64,
    /// BUILD → ACTIVE.
    pub server_boot_secs: f64,
    /// ACTIVE → gone after DELETE.
    pub server_delete_secs: f64,
    /// LB PENDING_CREATE → ACTIVE.
    pub lb_create_secs: f64,
    /// LB PENDING_UPDATE → ACTIVE after a child (listener, pool, member, monitor) change.
    pub lb_update_secs: f64,
    /// LB PENDING_DELETE → gone.
    pub lb_delete_secs: f64,
    /// Volume creating → available.
    pub volume_create_secs: f64,
    /// A volume create's answer comes this long after the volume exists (listed, `creating`): real
    /// Cinder commits the volume's row, then casts to the scheduler and commits quota before it
    /// answers, and a slow message bus or proxy stretches that. A client killed meanwhile never
    /// learns the id of the volume it made. Read while the answer waits, so lowering it releases
    /// answers already held. 0 (the default): at once.
    pub volume_create_answer_secs: f64,
    /// How long an application credential create's transaction holds the access-rule rows it
    /// inserts before it commits. A create of the same user that inserts one of those rules
    /// meanwhile fails as Keystone's does on the row's unique key (a 409 naming its credential).
    pub app_credential_commit_secs: f64,
    /// Volume deleting → gone.
    pub volume_delete_secs: f64,
    /// Volume attaching → in-use, and detaching → available (Nova's attach and detach).
    pub volume_attach_secs: f64,
    /// Volume extending → available (or back to in-use).
    pub volume_extend_secs: f64,
    /// Snapshot creating → available.
    pub snapshot_create_secs: f64,
    /// Snapshot deleting → gone.
    pub snapshot_delete_secs: f64,
}

impl Default for LatencyModel {
    fn default() -> Self {
        LatencyModel {
            per_call_secs: 0.05,
            server_boot_secs: 30.0,
            server_delete_secs: 5.0,
            lb_create_secs: 60.0,
            lb_update_secs: 5.0,
            lb_delete_secs: 10.0,
            volume_create_secs: 5.0,
            volume_create_answer_secs: 0.0,
            // A few of MariaDB's milliseconds for the credential, its roles and its rules.
            app_credential_commit_secs: 0.02,
            volume_delete_secs: 3.0,
            volume_attach_secs: 3.0,
            volume_extend_secs: 3.0,
            snapshot_create_secs: 5.0,
            snapshot_delete_secs: 3.0,
        }
    }
}

impl LatencyModel {
    /// No per-call latency; state machines keep their relative durations.
    pub fn instant() -> Self {
        LatencyModel {
            per_call_secs: 0.0,
            ..Default::default()
        }
    }
}

/// How Nova places a server of an `anti-affinity` group. The scheduler filters on the hosts the
/// group's members have *claimed*; a member chosen but not yet claimed on its compute host is not
/// seen, so boots into one group at the same moment can be sent to one host. Nova's compute then
/// checks the policy again after its claim (`_validate_instance_group_policy`), and a violation
/// reschedules the boot to the next of its alternate hosts, `max_attempts` hosts at most.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerModel {
    /// Nova's `[scheduler] max_attempts` (default 3): the hosts one boot may try, its first choice
    /// and the alternates chosen with it.
    pub max_attempts: u32,
    /// Cloud seconds between the scheduler's choice and the compute host's claim, and between a
    /// failed check and the claim on the next alternate (spread per member: the conductor's round
    /// trips differ). Two claims on one host less than this apart both fail the check: each compute
    /// sees the other's instance on its host. 0 (the default): a boot claims its host when it is
    /// chosen, and boots never race.
    pub claim_delay_secs: f64,
}

impl Default for SchedulerModel {
    fn default() -> Self {
        SchedulerModel {
            max_attempts: 3,
            claim_delay_secs: 0.0,
        }
    }
}

/// Default per-project quotas (what a fresh devstack project gets).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quotas {
    pub instances: i64,
    pub cores: i64,
    pub ram_mb: i64,
    pub key_pairs: i64,
    pub server_groups: i64,
    pub server_group_members: i64,
    pub networks: i64,
    pub subnets: i64,
    pub ports: i64,
    pub routers: i64,
    pub floating_ips: i64,
    pub security_groups: i64,
    pub security_group_rules: i64,
    pub volumes: i64,
    pub gigabytes: i64,
    pub snapshots: i64,
    pub load_balancers: i64,
    pub listeners: i64,
    pub pools: i64,
    pub members: i64,
    pub health_monitors: i64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            instances: 10,
            cores: 20,
            ram_mb: 51_200,
            key_pairs: 100,
            server_groups: 10,
            server_group_members: 10,
            networks: 100,
            subnets: 100,
            ports: 500,
            routers: 10,
            floating_ips: 50,
            security_groups: 10,
            security_group_rules: 100,
            volumes: 10,
            gigabytes: 1000,
            snapshots: 10,
            load_balancers: -1,
            listeners: -1,
            pools: -1,
            members: -1,
            health_monitors: -1,
        }
    }
}
