//! The typed cloud.conf with the upstream CCM's sections, keys, defaults and meanings
//! (research/occm.md §1.1; upstream `pkg/openstack/openstack.go` `ReadConfig` and
//! `pkg/client/client.go` `AuthOpts`), plus the checks the upstream leaves to runtime failures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use kos_cloud::{AppCredentialRef, CloudProfile, Env, IdOrName, Interface, ProfileAuth, Source};
use secrecy::SecretString;

use super::ConfigError;
use super::gcfg::{Document, Entry, section_label};
use super::semantics::{Diagnostic, Diags, SectionReader, format_go_duration};

/// Everything the CCM reads from cloud.conf, defaults applied.
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// The file name used in messages.
    pub file: String,
    pub global: Global,
    pub networking: Networking,
    pub load_balancer: LoadBalancer,
    /// `[LoadBalancerClass "name"]` sections by name (case-sensitive, as gcfg keeps subsections).
    pub load_balancer_classes: BTreeMap<String, LoadBalancerClass>,
    pub metadata: Metadata,
    pub route: Route,
    /// Read by cinder-csi only; checked here because both often share one file.
    pub block_storage: BlockStorage,
    /// (section label, key) → line of the value in effect.
    origins: BTreeMap<(String, &'static str), u32>,
    /// Lower-case section name → line of its first header.
    section_lines: BTreeMap<String, u32>,
}

/// `[Global]`: how to reach and authenticate to the cloud.
#[derive(Debug, Clone, Default)]
pub struct Global {
    pub auth_url: Option<String>,
    pub user_id: Option<String>,
    pub username: Option<String>,
    pub password: Option<SecretString>,
    /// Also accepted as `project-id` (kos-ccm only; the upstream ignores that spelling).
    pub tenant_id: Option<String>,
    pub tenant_name: Option<String>,
    pub tenant_domain_id: Option<String>,
    pub tenant_domain_name: Option<String>,
    pub user_domain_id: Option<String>,
    pub user_domain_name: Option<String>,
    /// The user's and the project's domain when theirs are not given.
    pub domain_id: Option<String>,
    pub domain_name: Option<String>,
    pub trust_id: Option<String>,
    pub trustee_id: Option<String>,
    pub trustee_password: Option<SecretString>,
    pub application_credential_id: Option<String>,
    pub application_credential_name: Option<String>,
    pub application_credential_secret: Option<SecretString>,
    pub token: Option<SecretString>,
    pub region: Option<String>,
    /// `os-endpoint-type`; `None` means public.
    pub endpoint_type: Option<Interface>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The upstream's field is a string compared with "true": only that value disables checks.
    pub tls_insecure: bool,
    pub use_clouds: bool,
    pub clouds_file: Option<PathBuf>,
    pub cloud: Option<String>,
}

/// `[Networking]`: which node addresses are reported.
#[derive(Debug, Clone, Default)]
pub struct Networking {
    pub ipv6_support_disabled: bool,
    /// Multi-valued: addresses on these networks are ExternalIPs.
    pub public_network_names: Vec<String>,
    /// Multi-valued: when set, only these networks give InternalIPs.
    pub internal_network_names: Vec<String>,
    /// Addresses in earlier CIDRs come first.
    pub address_sort_order: Vec<IpNet>,
}

/// Octavia's pool algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LbMethod {
    #[default]
    RoundRobin,
    LeastConnections,
    SourceIp,
    SourceIpPort,
}

impl LbMethod {
    pub const ALL: [&'static str; 4] = [
        "ROUND_ROBIN",
        "LEAST_CONNECTIONS",
        "SOURCE_IP",
        "SOURCE_IP_PORT",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LbMethod::RoundRobin => "ROUND_ROBIN",
            LbMethod::LeastConnections => "LEAST_CONNECTIONS",
            LbMethod::SourceIp => "SOURCE_IP",
            LbMethod::SourceIpPort => "SOURCE_IP_PORT",
        }
    }

    fn parse(s: &str) -> Option<LbMethod> {
        Some(match s {
            "ROUND_ROBIN" => LbMethod::RoundRobin,
            "LEAST_CONNECTIONS" => LbMethod::LeastConnections,
            "SOURCE_IP" => LbMethod::SourceIp,
            "SOURCE_IP_PORT" => LbMethod::SourceIpPort,
            _ => return None,
        })
    }
}

/// `[LoadBalancer]`: how Services of type LoadBalancer become Octavia load balancers.
#[derive(Debug, Clone)]
pub struct LoadBalancer {
    pub enabled: bool,
    /// Only `v2` means anything; kept to warn about it.
    pub lb_version: Option<String>,
    pub lb_provider: String,
    pub lb_method: LbMethod,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
    pub network_id: Option<String>,
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    /// Every Service internal; the annotation is ignored.
    pub internal_lb: bool,
    pub create_monitor: bool,
    pub monitor_delay: Duration,
    pub monitor_timeout: Duration,
    pub monitor_max_retries: u32,
    pub monitor_max_retries_down: u32,
    pub manage_security_groups: bool,
    /// `k=v,k2,k3=v3` over node labels; a key without `=` maps to "" (any value).
    pub node_selector: BTreeMap<String, String>,
    pub cascade_delete: bool,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    pub enable_ingress_hostname: bool,
    pub ingress_hostname_suffix: String,
    pub default_tls_container_ref: Option<String>,
    pub container_store: String,
    pub max_shared_lb: u32,
    /// kos's own (`enable-cross-namespace-sharing`, default false): a Service may join, through
    /// `load-balancer-id`, a load balancer that Services of another namespace use. Off, sharing
    /// stays within a namespace, so one namespace cannot put listeners on another's address.
    pub cross_namespace_sharing: bool,
    pub provider_requires_serial_api_calls: bool,
}

impl Default for LoadBalancer {
    /// The upstream's `ReadConfig` defaults.
    fn default() -> Self {
        LoadBalancer {
            enabled: true,
            lb_version: None,
            lb_provider: "amphora".into(),
            lb_method: LbMethod::RoundRobin,
            subnet_id: None,
            member_subnet_id: None,
            network_id: None,
            floating_network_id: None,
            floating_subnet_id: None,
            floating_subnet: None,
            floating_subnet_tags: None,
            internal_lb: false,
            create_monitor: false,
            monitor_delay: Duration::from_secs(5),
            monitor_timeout: Duration::from_secs(3),
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            manage_security_groups: false,
            node_selector: BTreeMap::new(),
            cascade_delete: true,
            flavor_id: None,
            availability_zone: None,
            enable_ingress_hostname: false,
            ingress_hostname_suffix: "nip.io".into(),
            default_tls_container_ref: None,
            container_store: "barbican".into(),
            max_shared_lb: 2,
            cross_namespace_sharing: false,
            provider_requires_serial_api_calls: false,
        }
    }
}

/// `[LoadBalancerClass "name"]`, chosen per Service with `loadbalancer.openstack.org/class`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancerClass {
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    pub network_id: Option<String>,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
}

/// Where instance metadata comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataSource {
    ConfigDrive,
    MetadataService,
}

impl MetadataSource {
    pub fn as_str(self) -> &'static str {
        match self {
            MetadataSource::ConfigDrive => "configDrive",
            MetadataSource::MetadataService => "metadataService",
        }
    }
}

/// `[Metadata]`.
#[derive(Debug, Clone)]
pub struct Metadata {
    pub search_order: Vec<MetadataSource>,
    /// The upstream also uses it as the timeout of every OpenStack API call.
    pub request_timeout: Duration,
}

impl Default for Metadata {
    fn default() -> Self {
        Metadata {
            search_order: vec![MetadataSource::ConfigDrive, MetadataSource::MetadataService],
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// `[Route]`: a router id turns the route controller on.
#[derive(Debug, Clone, Default)]
pub struct Route {
    pub router_id: Option<String>,
}

/// `[BlockStorage]`: cinder-csi's; the CCM never reads it.
#[derive(Debug, Clone, Default)]
pub struct BlockStorage {
    pub bs_version: Option<String>,
    pub trust_device_path: bool,
    pub ignore_volume_az: bool,
    pub node_volume_attach_limit: Option<u32>,
    pub rescan_on_resize: bool,
    /// Send Cinder no microversion (old clouds); online extend is then refused.
    pub ignore_volume_microversion: bool,
}

/// A parsed cloud.conf and the warnings about it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: CloudConfig,
    pub warnings: Vec<Diagnostic>,
}

/// One key of the effective configuration, for `check-config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveRow {
    pub key: &'static str,
    /// `None` when unset; secrets are already replaced by `<redacted>`.
    pub value: Option<String>,
    /// Line it was set on, `None` for a default.
    pub line: Option<u32>,
}

/// One section of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveSection {
    pub label: String,
    pub rows: Vec<EffectiveRow>,
}

/// A section's label as first written, the line of its first header, and all its entries.
type Group<'a> = (String, u32, Vec<&'a Entry>);

const LB_PROVIDERS: [&str; 5] = ["amphora", "octavia", "ovn", "amphorav2", "f5"];

impl CloudConfig {
    /// Reads and checks a cloud.conf file.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let name = path.display().to_string();
        let doc = super::gcfg::parse_bytes(&name, &bytes).map_err(ConfigError::Syntax)?;
        Self::from_document(&name, &doc)
    }

    /// Parses and checks cloud.conf text; `file` names it in messages.
    pub fn parse(file: &str, text: &str) -> Result<Loaded, ConfigError> {
        let doc = super::gcfg::parse(file, text).map_err(ConfigError::Syntax)?;
        Self::from_document(file, &doc)
    }

    /// Maps a gcfg document onto the upstream's sections, with defaults and checks.
    pub fn from_document(file: &str, doc: &Document) -> Result<Loaded, ConfigError> {
        let mut d = Diags::default();
        let mut groups: BTreeMap<(String, Option<String>), Group> = BTreeMap::new();
        let mut section_lines = BTreeMap::new();
        for s in &doc.sections {
            let lower = s.name.to_lowercase();
            section_lines.entry(lower.clone()).or_insert(s.pos.line);
            let g = groups
                .entry((lower, s.subsection.clone()))
                .or_insert_with(|| (s.label(), s.pos.line, Vec::new()));
            g.2.extend(s.entries.iter());
        }

        let mut cfg = CloudConfig {
            file: file.to_owned(),
            global: Global::default(),
            networking: Networking::default(),
            load_balancer: LoadBalancer::default(),
            load_balancer_classes: BTreeMap::new(),
            metadata: Metadata::default(),
            route: Route::default(),
            block_storage: BlockStorage::default(),
            origins: BTreeMap::new(),
            section_lines,
        };
        let mut readers: BTreeMap<&str, SectionReader> = BTreeMap::new();
        for ((lower, sub), (label, line, entries)) in &groups {
            let plain = matches!(
                lower.as_str(),
                "global" | "networking" | "loadbalancer" | "metadata" | "route" | "blockstorage"
            );
            let diag = |msg: String| Diagnostic {
                file: file.to_owned(),
                line: *line,
                section: label.clone(),
                key: None,
                message: msg,
            };
            match (lower.as_str(), sub) {
                (name, None) if plain => {
                    readers.insert(
                        canonical(name),
                        SectionReader::new(file, label.clone(), *line, entries.clone()),
                    );
                }
                (_, Some(_)) if plain => d.warnings.push(diag(format!(
                    "[{}] takes no subsection: this section and its keys are ignored (the upstream CCM \
                     ignores them too{})",
                    canonical(lower),
                    if lower == "global" {
                        "; only cinder-csi reads [Global \"name\"] for more regions"
                    } else {
                        ""
                    }
                ))),
                ("loadbalancerclass", sub) => {
                    let name = sub.clone().unwrap_or_default();
                    if name.is_empty() {
                        d.warnings.push(diag(
                            "a class without a name can never be selected: write [LoadBalancerClass \"name\"]"
                                .into(),
                        ));
                    }
                    let mut r = SectionReader::new(file, label.clone(), *line, entries.clone());
                    let class = read_class(&mut r, &mut d);
                    if class.floating_subnet_id.is_none()
                        && class.floating_subnet.is_none()
                        && class.floating_subnet_tags.is_none()
                    {
                        d.warnings.push(r.diag(
                            *line,
                            None,
                            "none of floating-subnet-id, floating-subnet, floating-subnet-tags is set: \
                             the upstream documents one of them as mandatory in a class",
                        ));
                    }
                    let origins = r.finish(&mut d);
                    cfg.note_origins(label, origins);
                    cfg.load_balancer_classes.insert(name, class);
                }
                _ => d.warnings.push(diag(format!(
                    "unknown section, ignored (the upstream CCM ignores it too); known sections: \
                     Global, Networking, LoadBalancer, LoadBalancerClass \"name\", Metadata, Route{}",
                    if lower == "blockstorage" { "" } else { ", BlockStorage" }
                ))),
            }
        }
        let mut take = |name: &'static str| {
            readers.remove(name).unwrap_or_else(|| {
                let line = 1;
                SectionReader::new(file, format!("[{name}]"), line, Vec::new())
            })
        };
        let mut sections = [
            take("Global"),
            take("Networking"),
            take("LoadBalancer"),
            take("Metadata"),
            take("Route"),
            take("BlockStorage"),
        ];
        let [g, n, lb, m, rt, bs] = &mut sections;
        cfg.global = read_global(g, &mut d);
        cfg.networking = read_networking(n, &mut d);
        cfg.load_balancer = read_load_balancer(lb, &mut d);
        cfg.metadata = read_metadata(m, &mut d);
        cfg.route = Route {
            router_id: rt.string("router-id", &mut d),
        };
        cfg.block_storage = read_block_storage(bs, &mut d);
        let global_label = g.label.clone();
        for r in sections {
            let label = r.label.clone();
            let origins = r.finish(&mut d);
            cfg.note_origins(&label, origins);
        }
        cfg.check_global(&global_label, &mut d);
        d.errors.sort_by_key(|e| e.line);
        d.warnings.sort_by_key(|e| e.line);
        if d.errors.is_empty() {
            Ok(Loaded {
                config: cfg,
                warnings: d.warnings,
            })
        } else {
            Err(ConfigError::Invalid {
                errors: d.errors,
                warnings: d.warnings,
            })
        }
    }

    fn note_origins(&mut self, label: &str, origins: BTreeMap<&'static str, u32>) {
        for (k, line) in origins {
            self.origins.insert((canonical_label(label), k), line);
        }
    }

    /// The line a key was set on.
    pub fn line_of(&self, section: &str, key: &str) -> Option<u32> {
        self.origins
            .iter()
            .find(|((s, k), _)| s == &canonical_label(&format!("[{section}]")) && *k == key)
            .map(|(_, l)| *l)
    }

    fn global_diag(
        &self,
        label: &str,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let line = key
            .and_then(|k| self.line_of("Global", k))
            .or_else(|| self.section_lines.get("global").copied())
            .unwrap_or(1);
        Diagnostic {
            file: self.file.clone(),
            line,
            section: label.to_owned(),
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }

    /// Checks auth that can be checked without clouds.yaml.
    fn check_global(&self, label: &str, d: &mut Diags) {
        let g = &self.global;
        for (key, what) in [
            ("trust-id", "Keystone trusts are"),
            ("token", "a static token is"),
            ("cert-file", "TLS client certificates are"),
            ("key-file", "TLS client certificates are"),
        ] {
            let set = match key {
                "trust-id" => g.trust_id.is_some(),
                "token" => g.token.is_some(),
                "cert-file" => g.cert_file.is_some(),
                _ => g.key_file.is_some(),
            };
            if set {
                d.errors.push(self.global_diag(
                    label,
                    Some(key),
                    format!(
                        "{what} not supported by kos-ccm yet: use username/password or an application credential"
                    ),
                ));
            }
        }
        if g.use_clouds {
            return;
        }
        if g.auth_url.is_none() {
            d.errors.push(self.global_diag(
                label,
                Some("auth-url"),
                "is required (Keystone's URL, e.g. https://keystone.example.com:5000/v3), unless \
                 use-clouds = true reads it from clouds.yaml",
            ));
        }
        if let Err(errors) = self.build_auth(g, label) {
            d.errors.extend(errors);
        }
        if g.region.is_none() {
            d.warnings.push(self.global_diag(
                label,
                Some("region"),
                "not set: the first endpoint of each service in the catalog is used and nodes get no \
                 topology.kubernetes.io/region label",
            ));
        }
        if let Some(url) = &g.auth_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            d.warnings.push(self.global_diag(
                label,
                Some("auth-url"),
                format!("{url:?} does not look like an http(s) URL"),
            ));
        }
    }

    /// The credentials of `g` as kos-cloud wants them; gophercloud's rules: the generic
    /// `domain-*` stands in for the user's and the project's domain.
    fn build_auth(&self, g: &Global, label: &str) -> Result<ProfileAuth, Vec<Diagnostic>> {
        let err = |key: Option<&str>, msg: String| vec![self.global_diag(label, key, msg)];
        let user = g
            .user_id
            .clone()
            .map(IdOrName::Id)
            .or_else(|| g.username.clone().map(IdOrName::Name));
        let generic_domain = || {
            g.domain_id
                .clone()
                .map(IdOrName::Id)
                .or_else(|| g.domain_name.clone().map(IdOrName::Name))
        };
        let user_domain = g
            .user_domain_id
            .clone()
            .map(IdOrName::Id)
            .or_else(|| g.user_domain_name.clone().map(IdOrName::Name))
            .or_else(generic_domain)
            .or_else(|| {
                matches!(user, Some(IdOrName::Name(_))).then(|| IdOrName::Id("default".into()))
            });
        let app_key = [
            (
                "application-credential-secret",
                g.application_credential_secret.is_some(),
            ),
            (
                "application-credential-id",
                g.application_credential_id.is_some(),
            ),
            (
                "application-credential-name",
                g.application_credential_name.is_some(),
            ),
        ]
        .into_iter()
        .find(|(_, set)| *set)
        .map(|(k, _)| k);
        if let Some(app_key) = app_key {
            if g.password.is_some() {
                let pw_line = self
                    .line_of("Global", "password")
                    .map_or(String::new(), |l| format!(" (line {l})"));
                return Err(err(
                    Some(app_key),
                    format!(
                        "cannot be combined with password{pw_line}: authenticate either with \
                         username and password or with an application credential"
                    ),
                ));
            }
            let Some(secret) = g.application_credential_secret.clone() else {
                return Err(err(
                    Some(app_key),
                    "needs application-credential-secret".into(),
                ));
            };
            let credential = match (&g.application_credential_id, &g.application_credential_name) {
                (Some(id), _) => AppCredentialRef::Id(id.clone()),
                (None, Some(name)) => AppCredentialRef::Name {
                    name: name.clone(),
                    user: user.ok_or_else(|| {
                        err(
                            Some("application-credential-name"),
                            "needs username or user-id: a credential name is unique per user only"
                                .into(),
                        )
                    })?,
                    user_domain,
                },
                (None, None) => {
                    return Err(err(
                        Some("application-credential-secret"),
                        "needs application-credential-id, or application-credential-name with the user"
                            .into(),
                    ));
                }
            };
            return Ok(ProfileAuth::ApplicationCredential { credential, secret });
        }
        let Some(password) = g.password.clone() else {
            return Err(match &user {
                Some(_) => err(
                    Some(if g.user_id.is_some() {
                        "user-id"
                    } else {
                        "username"
                    }),
                    "needs password (or use an application credential instead)".into(),
                ),
                None => err(
                    None,
                    "no credentials: set username (or user-id) and password, or \
                     application-credential-id (or -name) and application-credential-secret"
                        .into(),
                ),
            });
        };
        let Some(user) = user else {
            return Err(err(Some("password"), "needs username or user-id".into()));
        };
        let project = g
            .tenant_id
            .clone()
            .map(IdOrName::Id)
            .or_else(|| g.tenant_name.clone().map(IdOrName::Name));
        let project_domain = g
            .tenant_domain_id
            .clone()
            .map(IdOrName::Id)
            .or_else(|| g.tenant_domain_name.clone().map(IdOrName::Name))
            .or_else(generic_domain)
            .or_else(|| {
                matches!(project, Some(IdOrName::Name(_))).then(|| IdOrName::Id("default".into()))
            });
        Ok(ProfileAuth::Password {
            user,
            user_domain,
            password,
            project,
            project_domain,
        })
    }

    /// The kos-cloud profile the CCM authenticates with. With `use-clouds`, clouds.yaml (found
    /// through `env` like the upstream: `clouds-file`, `OS_CLIENT_CONFIG_FILE`, the usual
    /// directories) fills every key that `[Global]` leaves empty.
    pub fn profile(&self, env: &Env) -> Result<CloudProfile, ConfigError> {
        let label = "[Global]";
        let invalid = |errors: Vec<Diagnostic>| ConfigError::Invalid {
            errors,
            warnings: Vec::new(),
        };
        let mut g = self.global.clone();
        let mut from_clouds = None;
        if g.use_clouds {
            let base = CloudProfile::load(env, g.cloud.as_deref(), g.clouds_file.as_deref())
                .map_err(|source| ConfigError::Clouds {
                    file: self.file.clone(),
                    source,
                })?;
            fill_from_profile(&mut g, &base);
            from_clouds = Some(base);
        }
        let auth_url = g.auth_url.clone().ok_or_else(|| {
            invalid(vec![self.global_diag(
                label,
                Some("auth-url"),
                "is required: neither [Global] nor clouds.yaml sets it",
            )])
        })?;
        let auth = self.build_auth(&g, label).map_err(invalid)?;
        let name = g.cloud.clone().unwrap_or_else(|| self.file.clone());
        let mut p = CloudProfile::new(name, auth_url, auth);
        p.region_name = g.region.clone();
        p.interface = g
            .endpoint_type
            .or(from_clouds.as_ref().map(|b| b.interface))
            .unwrap_or_default();
        p.cacert = g.ca_file.clone();
        p.verify = !g.tls_insecure && from_clouds.as_ref().is_none_or(|b| b.verify);
        if let Some(base) = &from_clouds {
            p.sources = base.sources.clone();
        }
        let here = Source::File(PathBuf::from(&self.file));
        for (section, key) in self.origins.keys() {
            if section == "[global]" {
                p.sources.insert(key.replace('-', "_"), here.clone());
            }
        }
        Ok(p)
    }

    /// Every key with its effective value, secrets redacted, for `check-config`.
    pub fn effective(&self) -> Vec<EffectiveSection> {
        let mut out = Vec::new();
        let g = &self.global;
        let lb = &self.load_balancer;
        let n = &self.networking;
        let s = |v: &Option<String>| v.clone();
        let p = |v: &Option<PathBuf>| v.as_ref().map(|p| p.display().to_string());
        let secret = |v: &Option<SecretString>| v.as_ref().map(|_| "<redacted>".to_owned());
        let b = |v: bool| Some(v.to_string());
        let list = |v: &[String]| (!v.is_empty()).then(|| v.join(", "));
        let mut section = |name: &str, rows: Vec<(&'static str, Option<String>)>| {
            let label = format!("[{name}]");
            out.push(EffectiveSection {
                rows: rows
                    .into_iter()
                    .map(|(key, value)| EffectiveRow {
                        key,
                        value,
                        line: self.origins.get(&(canonical_label(&label), key)).copied(),
                    })
                    .collect(),
                label,
            });
        };
        section(
            "Global",
            vec![
                ("auth-url", s(&g.auth_url)),
                ("region", s(&g.region)),
                (
                    "os-endpoint-type",
                    Some(g.endpoint_type.unwrap_or_default().as_str().into()),
                ),
                ("user-id", s(&g.user_id)),
                ("username", s(&g.username)),
                ("password", secret(&g.password)),
                ("tenant-id", s(&g.tenant_id)),
                ("tenant-name", s(&g.tenant_name)),
                ("tenant-domain-id", s(&g.tenant_domain_id)),
                ("tenant-domain-name", s(&g.tenant_domain_name)),
                ("user-domain-id", s(&g.user_domain_id)),
                ("user-domain-name", s(&g.user_domain_name)),
                ("domain-id", s(&g.domain_id)),
                ("domain-name", s(&g.domain_name)),
                ("trust-id", s(&g.trust_id)),
                ("trustee-id", s(&g.trustee_id)),
                ("trustee-password", secret(&g.trustee_password)),
                ("application-credential-id", s(&g.application_credential_id)),
                (
                    "application-credential-name",
                    s(&g.application_credential_name),
                ),
                (
                    "application-credential-secret",
                    secret(&g.application_credential_secret),
                ),
                ("token", secret(&g.token)),
                ("ca-file", p(&g.ca_file)),
                ("cert-file", p(&g.cert_file)),
                ("key-file", p(&g.key_file)),
                ("tls-insecure", b(g.tls_insecure)),
                ("use-clouds", b(g.use_clouds)),
                ("clouds-file", p(&g.clouds_file)),
                ("cloud", s(&g.cloud)),
            ],
        );
        section(
            "Networking",
            vec![
                ("ipv6-support-disabled", b(n.ipv6_support_disabled)),
                ("public-network-name", list(&n.public_network_names)),
                ("internal-network-name", list(&n.internal_network_names)),
                (
                    "address-sort-order",
                    (!n.address_sort_order.is_empty()).then(|| {
                        n.address_sort_order
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    }),
                ),
            ],
        );
        let selector = (!lb.node_selector.is_empty()).then(|| {
            lb.node_selector
                .iter()
                .map(|(k, v)| {
                    if v.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        });
        section(
            "LoadBalancer",
            vec![
                ("enabled", b(lb.enabled)),
                ("lb-version", s(&lb.lb_version)),
                ("lb-provider", Some(lb.lb_provider.clone())),
                ("lb-method", Some(lb.lb_method.as_str().into())),
                ("subnet-id", s(&lb.subnet_id)),
                ("member-subnet-id", s(&lb.member_subnet_id)),
                ("network-id", s(&lb.network_id)),
                ("floating-network-id", s(&lb.floating_network_id)),
                ("floating-subnet-id", s(&lb.floating_subnet_id)),
                ("floating-subnet", s(&lb.floating_subnet)),
                ("floating-subnet-tags", s(&lb.floating_subnet_tags)),
                ("internal-lb", b(lb.internal_lb)),
                ("create-monitor", b(lb.create_monitor)),
                ("monitor-delay", Some(format_go_duration(lb.monitor_delay))),
                (
                    "monitor-timeout",
                    Some(format_go_duration(lb.monitor_timeout)),
                ),
                (
                    "monitor-max-retries",
                    Some(lb.monitor_max_retries.to_string()),
                ),
                (
                    "monitor-max-retries-down",
                    Some(lb.monitor_max_retries_down.to_string()),
                ),
                ("manage-security-groups", b(lb.manage_security_groups)),
                ("node-selector", selector),
                ("cascade-delete", b(lb.cascade_delete)),
                ("flavor-id", s(&lb.flavor_id)),
                ("availability-zone", s(&lb.availability_zone)),
                ("enable-ingress-hostname", b(lb.enable_ingress_hostname)),
                (
                    "ingress-hostname-suffix",
                    Some(lb.ingress_hostname_suffix.clone()),
                ),
                (
                    "default-tls-container-ref",
                    s(&lb.default_tls_container_ref),
                ),
                ("container-store", Some(lb.container_store.clone())),
                ("max-shared-lb", Some(lb.max_shared_lb.to_string())),
                (
                    "enable-cross-namespace-sharing",
                    b(lb.cross_namespace_sharing),
                ),
                (
                    "provider-requires-serial-api-calls",
                    b(lb.provider_requires_serial_api_calls),
                ),
            ],
        );
        for (name, c) in &self.load_balancer_classes {
            let label = section_label("LoadBalancerClass", Some(name));
            let rows = vec![
                ("floating-network-id", s(&c.floating_network_id)),
                ("floating-subnet-id", s(&c.floating_subnet_id)),
                ("floating-subnet", s(&c.floating_subnet)),
                ("floating-subnet-tags", s(&c.floating_subnet_tags)),
                ("network-id", s(&c.network_id)),
                ("subnet-id", s(&c.subnet_id)),
                ("member-subnet-id", s(&c.member_subnet_id)),
            ];
            out.push(EffectiveSection {
                rows: rows
                    .into_iter()
                    .map(|(key, value)| EffectiveRow {
                        key,
                        value,
                        line: self.origins.get(&(canonical_label(&label), key)).copied(),
                    })
                    .collect(),
                label,
            });
        }
        let mut section = |name: &str, rows: Vec<(&'static str, Option<String>)>| {
            let label = format!("[{name}]");
            out.push(EffectiveSection {
                rows: rows
                    .into_iter()
                    .map(|(key, value)| EffectiveRow {
                        key,
                        value,
                        line: self.origins.get(&(canonical_label(&label), key)).copied(),
                    })
                    .collect(),
                label,
            });
        };
        section(
            "Metadata",
            vec![
                (
                    "search-order",
                    Some(
                        self.metadata
                            .search_order
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                ),
                (
                    "request-timeout",
                    Some(format_go_duration(self.metadata.request_timeout)),
                ),
            ],
        );
        section("Route", vec![("router-id", s(&self.route.router_id))]);
        if self.section_lines.contains_key("blockstorage") {
            let bs = &self.block_storage;
            section(
                "BlockStorage",
                vec![
                    ("bs-version", s(&bs.bs_version)),
                    ("trust-device-path", b(bs.trust_device_path)),
                    ("ignore-volume-az", b(bs.ignore_volume_az)),
                    (
                        "node-volume-attach-limit",
                        bs.node_volume_attach_limit.map(|n| n.to_string()),
                    ),
                    ("rescan-on-resize", b(bs.rescan_on_resize)),
                    (
                        "ignore-volume-microversion",
                        b(bs.ignore_volume_microversion),
                    ),
                ],
            );
        }
        out
    }
}

/// The canonical spelling of a known section.
fn canonical(lower: &str) -> &'static str {
    match lower {
        "global" => "Global",
        "networking" => "Networking",
        "loadbalancer" => "LoadBalancer",
        "loadbalancerclass" => "LoadBalancerClass",
        "metadata" => "Metadata",
        "route" => "Route",
        _ => "BlockStorage",
    }
}

/// Labels compared without regard to the case of the section name (not the subsection's).
fn canonical_label(label: &str) -> String {
    match label.split_once(' ') {
        Some((name, rest)) => format!("{} {rest}", name.to_lowercase()),
        None => label.to_lowercase(),
    }
}

/// clouds.yaml values for what `[Global]` leaves empty (upstream `ReadClouds`' `replaceEmpty`).
fn fill_from_profile(g: &mut Global, p: &CloudProfile) {
    fn fill<T: Clone>(slot: &mut Option<T>, v: Option<T>) {
        if slot.is_none() {
            *slot = v;
        }
    }
    fn split(v: &Option<IdOrName>) -> (Option<String>, Option<String>) {
        match v {
            Some(IdOrName::Id(i)) => (Some(i.clone()), None),
            Some(IdOrName::Name(n)) => (None, Some(n.clone())),
            None => (None, None),
        }
    }
    fill(&mut g.auth_url, Some(p.auth_url.clone()));
    fill(&mut g.region, p.region_name.clone());
    fill(&mut g.ca_file, p.cacert.clone());
    let explicit_auth = g.password.is_some() || g.application_credential_secret.is_some();
    match &p.auth {
        ProfileAuth::Password {
            user,
            user_domain,
            password,
            project,
            project_domain,
        } => {
            let (uid, uname) = split(&Some(user.clone()));
            let (udid, udname) = split(user_domain);
            let (pid, pname) = split(project);
            let (pdid, pdname) = split(project_domain);
            if g.user_id.is_none() && g.username.is_none() {
                g.user_id = uid;
                g.username = uname;
            }
            if g.user_domain_id.is_none() && g.user_domain_name.is_none() {
                g.user_domain_id = udid;
                g.user_domain_name = udname;
            }
            if g.tenant_id.is_none() && g.tenant_name.is_none() {
                g.tenant_id = pid;
                g.tenant_name = pname;
            }
            if g.tenant_domain_id.is_none() && g.tenant_domain_name.is_none() {
                g.tenant_domain_id = pdid;
                g.tenant_domain_name = pdname;
            }
            if !explicit_auth {
                g.password = Some(password.clone());
            }
        }
        ProfileAuth::ApplicationCredential { credential, secret } => {
            if explicit_auth {
                return;
            }
            match credential {
                AppCredentialRef::Id(id) => {
                    fill(&mut g.application_credential_id, Some(id.clone()))
                }
                AppCredentialRef::Name {
                    name,
                    user,
                    user_domain,
                } => {
                    fill(&mut g.application_credential_name, Some(name.clone()));
                    if g.user_id.is_none() && g.username.is_none() {
                        (g.user_id, g.username) = split(&Some(user.clone()));
                    }
                    if g.user_domain_id.is_none() && g.user_domain_name.is_none() {
                        (g.user_domain_id, g.user_domain_name) = split(user_domain);
                    }
                }
            }
            g.application_credential_secret = Some(secret.clone());
        }
    }
}

fn read_global(r: &mut SectionReader, d: &mut Diags) -> Global {
    let aliased = |r: &mut SectionReader, key: &'static str, alias: &'static str, d: &mut Diags| {
        let main = r.string(key, d);
        let other = r.string_at(alias, d);
        match (main, other) {
            (Some(m), Some((_, line))) => {
                d.warnings.push(r.diag(
                    line,
                    Some(alias),
                    format!("ignored: {key} is set too and wins"),
                ));
                Some(m)
            }
            (None, Some((v, line))) => {
                d.warnings.push(r.diag(
                    line,
                    Some(alias),
                    format!(
                        "read as {key}, but the upstream CCM ignores this spelling: write {key} to \
                         keep the file portable"
                    ),
                ));
                Some(v)
            }
            (m, None) => m,
        }
    };
    let tenant_id = aliased(r, "tenant-id", "project-id", d);
    let tenant_name = aliased(r, "tenant-name", "project-name", d);
    let tenant_domain_id = aliased(r, "tenant-domain-id", "project-domain-id", d);
    let tenant_domain_name = aliased(r, "tenant-domain-name", "project-domain-name", d);
    let endpoint_type = r.string_at("os-endpoint-type", d).and_then(|(v, line)| {
        let i = match v.to_ascii_lowercase().trim_end_matches("url") {
            "public" => Some(Interface::Public),
            "internal" => Some(Interface::Internal),
            "admin" => Some(Interface::Admin),
            _ => None,
        };
        if i.is_none() {
            d.errors.push(r.diag(
                line,
                Some("os-endpoint-type"),
                format!("value {v:?} is not one of public, internal, admin"),
            ));
        }
        i
    });
    // The upstream's TLSInsecure is a string compared with "true"; anything else keeps TLS checks.
    let tls_insecure = match r.string_at("tls-insecure", d) {
        None => false,
        Some((v, _)) if v == "true" => true,
        Some((v, _)) if v == "false" => false,
        Some((v, line)) => {
            d.warnings.push(r.diag(
                line,
                Some("tls-insecure"),
                format!(
                    "value {v:?} counts as false: the upstream CCM only disables TLS verification for \
                     exactly \"true\""
                ),
            ));
            false
        }
    };
    Global {
        auth_url: r.string("auth-url", d),
        user_id: r.string("user-id", d),
        username: r.string("username", d),
        password: r.secret("password", d),
        tenant_id,
        tenant_name,
        tenant_domain_id,
        tenant_domain_name,
        user_domain_id: r.string("user-domain-id", d),
        user_domain_name: r.string("user-domain-name", d),
        domain_id: r.string("domain-id", d),
        domain_name: r.string("domain-name", d),
        trust_id: r.string("trust-id", d),
        trustee_id: r.string("trustee-id", d),
        trustee_password: r.secret("trustee-password", d),
        application_credential_id: r.string("application-credential-id", d),
        application_credential_name: r.string("application-credential-name", d),
        application_credential_secret: r.secret("application-credential-secret", d),
        token: r.secret("token", d),
        region: r.string("region", d),
        endpoint_type,
        ca_file: r.string("ca-file", d).map(PathBuf::from),
        cert_file: r.string("cert-file", d).map(PathBuf::from),
        key_file: r.string("key-file", d).map(PathBuf::from),
        tls_insecure,
        use_clouds: r.bool("use-clouds", d).unwrap_or(false),
        clouds_file: r.string("clouds-file", d).map(PathBuf::from),
        cloud: r.string("cloud", d),
    }
}

fn read_networking(r: &mut SectionReader, d: &mut Diags) -> Networking {
    let address_sort_order = r
        .string_at("address-sort-order", d)
        .map(|(v, line)| {
            v.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .filter_map(|c| match c.parse::<IpNet>() {
                    Ok(net) => Some(net),
                    Err(_) => {
                        d.errors.push(r.diag(
                            line,
                            Some("address-sort-order"),
                            format!("{c:?} is not a CIDR (e.g. 10.0.0.0/8 or 2001:db8::/32)"),
                        ));
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Networking {
        ipv6_support_disabled: r.bool("ipv6-support-disabled", d).unwrap_or(false),
        public_network_names: r.multi("public-network-name", d),
        internal_network_names: r.multi("internal-network-name", d),
        address_sort_order,
    }
}

/// `floating-subnet`: a glob, `~regexp`, either negated with a leading `!`.
fn check_subnet_pattern(r: &SectionReader, key: &'static str, v: &str, line: u32, d: &mut Diags) {
    let p = v.strip_prefix('!').unwrap_or(v);
    if let Some(re) = p.strip_prefix('~')
        && let Err(e) = regex::Regex::new(re)
    {
        let first = e.to_string().lines().last().unwrap_or_default().to_owned();
        d.errors.push(r.diag(
            line,
            Some(key),
            format!("{re:?} is not a valid regular expression: {first}"),
        ));
    }
}

fn read_class(r: &mut SectionReader, d: &mut Diags) -> LoadBalancerClass {
    let floating_subnet = r.string_at("floating-subnet", d).map(|(v, line)| {
        check_subnet_pattern(r, "floating-subnet", &v, line, d);
        v
    });
    LoadBalancerClass {
        floating_network_id: r.string("floating-network-id", d),
        floating_subnet_id: r.string("floating-subnet-id", d),
        floating_subnet,
        floating_subnet_tags: r.string("floating-subnet-tags", d),
        network_id: r.string("network-id", d),
        subnet_id: r.string("subnet-id", d),
        member_subnet_id: r.string("member-subnet-id", d),
    }
}

fn read_load_balancer(r: &mut SectionReader, d: &mut Diags) -> LoadBalancer {
    let def = LoadBalancer::default();
    let lb_version = r.string_at("lb-version", d).map(|(v, line)| {
        if v != "v2" {
            d.warnings.push(r.diag(
                line,
                Some("lb-version"),
                format!(
                    "value {v:?} ignored: only v2 (Octavia) exists; the upstream CCM refuses to run \
                     its load balancer controller with any other value"
                ),
            ));
        }
        v
    });
    let lb_provider = match r.string_at("lb-provider", d) {
        Some((v, line)) => {
            if !LB_PROVIDERS.contains(&v.as_str()) {
                d.warnings.push(r.diag(
                    line,
                    Some("lb-provider"),
                    format!(
                        "{v:?} is not one of {} (passed to Octavia as is)",
                        LB_PROVIDERS.join(", ")
                    ),
                ));
            }
            v
        }
        None => def.lb_provider.clone(),
    };
    let method = r
        .one_of("lb-method", &LbMethod::ALL, d)
        .and_then(|m| LbMethod::parse(&m));
    let lb_method = match (lb_provider.as_str(), method) {
        ("ovn", None) => LbMethod::SourceIpPort,
        ("ovn", Some(m)) if m != LbMethod::SourceIpPort => {
            let line = r.origins.get("lb-method").copied().unwrap_or(r.line);
            d.errors.push(r.diag(
                line,
                Some("lb-method"),
                format!(
                    "{} is not supported by lb-provider ovn: use SOURCE_IP_PORT",
                    m.as_str()
                ),
            ));
            m
        }
        (_, m) => m.unwrap_or_default(),
    };
    let floating_subnet = r.string_at("floating-subnet", d).map(|(v, line)| {
        check_subnet_pattern(r, "floating-subnet", &v, line, d);
        v
    });
    let second = Duration::from_secs(1);
    let monitor_delay = r
        .duration("monitor-delay", second, d)
        .unwrap_or(def.monitor_delay);
    let monitor_timeout = r
        .duration("monitor-timeout", second, d)
        .unwrap_or(def.monitor_timeout);
    if monitor_timeout > monitor_delay {
        let line = r
            .origins
            .get("monitor-timeout")
            .or(r.origins.get("monitor-delay"))
            .copied()
            .unwrap_or(r.line);
        d.errors.push(r.diag(
            line,
            Some("monitor-timeout"),
            format!(
                "{} is longer than monitor-delay {}: Octavia rejects such a health monitor",
                format_go_duration(monitor_timeout),
                format_go_duration(monitor_delay)
            ),
        ));
    }
    let node_selector = r
        .string_at("node-selector", d)
        .map(|(v, line)| {
            let mut m = BTreeMap::new();
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, val) = part.split_once('=').unwrap_or((part, ""));
                if k.trim().is_empty() {
                    d.errors.push(r.diag(
                        line,
                        Some("node-selector"),
                        format!("{part:?} has no label key: write k=v,k2,k3=v3"),
                    ));
                    continue;
                }
                m.insert(k.trim().to_owned(), val.trim().to_owned());
            }
            m
        })
        .unwrap_or_default();
    let container_store = match r.string_at("container-store", d) {
        Some((v, line)) => {
            if v != "barbican" && v != "external" {
                d.warnings.push(r.diag(
                    line,
                    Some("container-store"),
                    format!("{v:?} is not one of barbican, external: treated like external (no validation)"),
                ));
            }
            v
        }
        None => def.container_store.clone(),
    };
    r.obsolete(
        "use-octavia",
        "Octavia is always used (Neutron-LBaaS support was removed upstream in v1.26)",
        d,
    );
    let retries = |r: &mut SectionReader, key, default: u32, d: &mut Diags| {
        r.int(key, 1, 10, d).map_or(default, |n| n as u32)
    };
    LoadBalancer {
        enabled: r.bool("enabled", d).unwrap_or(def.enabled),
        lb_version,
        lb_provider,
        lb_method,
        subnet_id: r.string("subnet-id", d),
        member_subnet_id: r.string("member-subnet-id", d),
        network_id: r.string("network-id", d),
        floating_network_id: r.string("floating-network-id", d),
        floating_subnet_id: r.string("floating-subnet-id", d),
        floating_subnet,
        floating_subnet_tags: r.string("floating-subnet-tags", d),
        internal_lb: r.bool("internal-lb", d).unwrap_or(def.internal_lb),
        create_monitor: r.bool("create-monitor", d).unwrap_or(def.create_monitor),
        monitor_delay,
        monitor_timeout,
        monitor_max_retries: retries(r, "monitor-max-retries", def.monitor_max_retries, d),
        monitor_max_retries_down: retries(
            r,
            "monitor-max-retries-down",
            def.monitor_max_retries_down,
            d,
        ),
        manage_security_groups: r
            .bool("manage-security-groups", d)
            .unwrap_or(def.manage_security_groups),
        node_selector,
        cascade_delete: r.bool("cascade-delete", d).unwrap_or(def.cascade_delete),
        flavor_id: r.string("flavor-id", d),
        availability_zone: r.string("availability-zone", d),
        enable_ingress_hostname: r
            .bool("enable-ingress-hostname", d)
            .unwrap_or(def.enable_ingress_hostname),
        ingress_hostname_suffix: r
            .string("ingress-hostname-suffix", d)
            .unwrap_or(def.ingress_hostname_suffix),
        default_tls_container_ref: r.string("default-tls-container-ref", d),
        container_store,
        max_shared_lb: r
            .int("max-shared-lb", 1, i64::MAX, d)
            .map_or(def.max_shared_lb, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        cross_namespace_sharing: r
            .bool("enable-cross-namespace-sharing", d)
            .unwrap_or(def.cross_namespace_sharing),
        provider_requires_serial_api_calls: r
            .bool("provider-requires-serial-api-calls", d)
            .unwrap_or(def.provider_requires_serial_api_calls),
    }
}

fn read_metadata(r: &mut SectionReader, d: &mut Diags) -> Metadata {
    let def = Metadata::default();
    // Upstream `CheckMetadataSearchOrder`: one or two of configDrive, metadataService.
    let search_order = match r.string_at("search-order", d) {
        None => def.search_order,
        Some((v, line)) => {
            let parts: Vec<&str> = v.split(',').map(str::trim).collect();
            let parsed: Option<Vec<MetadataSource>> = parts
                .iter()
                .map(|p| match *p {
                    "configDrive" => Some(MetadataSource::ConfigDrive),
                    "metadataService" => Some(MetadataSource::MetadataService),
                    _ => None,
                })
                .collect();
            match parsed {
                Some(order) if order.len() <= 2 => order,
                _ => {
                    d.errors.push(r.diag(
                        line,
                        Some("search-order"),
                        format!(
                            "value {v:?} is not one or two of configDrive, metadataService \
                             separated by a comma"
                        ),
                    ));
                    def.search_order
                }
            }
        }
    };
    // Zero means the default, as upstream's `RequestTimeout == MyDuration{}` test.
    let request_timeout = r
        .duration("request-timeout", Duration::ZERO, d)
        .filter(|t| !t.is_zero())
        .unwrap_or(def.request_timeout);
    Metadata {
        search_order,
        request_timeout,
    }
}

fn read_block_storage(r: &mut SectionReader, d: &mut Diags) -> BlockStorage {
    BlockStorage {
        bs_version: r.string("bs-version", d),
        trust_device_path: r.bool("trust-device-path", d).unwrap_or(false),
        ignore_volume_az: r.bool("ignore-volume-az", d).unwrap_or(false),
        node_volume_attach_limit: r
            .int("node-volume-attach-limit", 1, 256, d)
            .map(|n| n as u32),
        rescan_on_resize: r.bool("rescan-on-resize", d).unwrap_or(false),
        ignore_volume_microversion: r.bool("ignore-volume-microversion", d).unwrap_or(false),
    }
}
