//! Where a session's credentials come from: clouds.yaml (+ secure.yaml), or bare `OS_*` variables
//! from an openrc file. The result is our own [`CloudProfile`], never an SDK type, and every value
//! remembers its [`Source`] so an error can say which file or variable to fix.
//!
//! Loading reads the environment only through [`Env`], a plain map: tests build one and never touch
//! the process environment (they run in parallel).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde_json::Value;

use crate::error::CloudError;

/// The process environment as loading sees it: variables, the working directory (for
/// `./clouds.yaml`) and the system config directory (`/etc/openstack`).
#[derive(Debug, Clone)]
pub struct Env {
    vars: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    system_dir: PathBuf,
}

impl Env {
    /// A snapshot of the real process environment.
    pub fn process() -> Env {
        Env {
            vars: std::env::vars().collect(),
            cwd: std::env::current_dir().ok(),
            system_dir: PathBuf::from("/etc/openstack"),
        }
    }

    /// Only these variables; no working directory.
    pub fn from_vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Env {
        Env {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            cwd: None,
            system_dir: PathBuf::from("/etc/openstack"),
        }
    }

    pub fn with_cwd(mut self, dir: impl Into<PathBuf>) -> Env {
        self.cwd = Some(dir.into());
        self
    }

    pub fn with_system_dir(mut self, dir: impl Into<PathBuf>) -> Env {
        self.system_dir = dir.into();
        self
    }

    /// A variable's value; empty counts as unset (openrc files often `export OS_X=`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Directories searched for clouds.yaml and secure.yaml, in order.
    fn config_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        dirs.extend(self.cwd.clone());
        if let Some(x) = self.get("XDG_CONFIG_HOME") {
            dirs.push(Path::new(x).join("openstack"));
        }
        if let Some(h) = self.get("HOME") {
            dirs.push(Path::new(h).join(".config/openstack"));
        }
        dirs.push(self.system_dir.clone());
        dirs.dedup();
        dirs
    }
}

/// Checks that `path` is a PEM bundle holding at least one certificate, and returns how many. The
/// error is a phrase that follows the path ("does not exist", "holds no certificate ..."): the TLS
/// stack would otherwise ignore a file that is not one and fail later, naming neither.
pub fn check_ca_bundle(path: &Path) -> Result<usize, String> {
    // Bundles of every public CA are about 200 KiB.
    const MAX_BYTES: u64 = 16 << 20;
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_owned(),
        _ => format!("cannot be read ({e})"),
    })?;
    if !meta.is_file() {
        return Err("is not a file".into());
    }
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "is {} bytes, too large for a CA bundle",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read ({e})"))?;
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(
            "is not a PEM certificate bundle (it is binary: if it is DER, convert it with \
             `openssl x509 -inform der -outform pem`)"
                .into(),
        );
    };
    let mut count = 0;
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let Some(end) = body.find(END) else {
            return Err(format!(
                "has a certificate ({} number {}) without its `{END}` line",
                BEGIN,
                count + 1
            ));
        };
        let b64: String = body[..end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .unwrap_or_default();
        // A certificate is a DER SEQUENCE.
        if der.first() != Some(&0x30) {
            return Err(format!(
                "has a certificate block (number {}) that is not a certificate",
                count + 1
            ));
        }
        count += 1;
        rest = &body[end + END.len()..];
    }
    if count == 0 {
        return Err(format!(
            "is not a PEM certificate bundle: it holds no `{BEGIN}` block"
        ));
    }
    Ok(count)
}

/// A user, project or domain, named either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdOrName {
    Id(String),
    Name(String),
}

/// Which application credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppCredentialRef {
    Id(String),
    /// A name is unique per user only.
    Name {
        name: String,
        user: IdOrName,
        user_domain: Option<IdOrName>,
    },
}

/// How the session authenticates. `Debug` shows no secret (`SecretString` prints `[REDACTED]`).
#[derive(Debug, Clone)]
pub enum ProfileAuth {
    Password {
        user: IdOrName,
        user_domain: Option<IdOrName>,
        password: SecretString,
        project: Option<IdOrName>,
        project_domain: Option<IdOrName>,
    },
    ApplicationCredential {
        credential: AppCredentialRef,
        secret: SecretString,
    },
}

/// Which catalog endpoints to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interface {
    #[default]
    Public,
    Internal,
    Admin,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
            Interface::Admin => "admin",
        }
    }

    /// Accepts the Keystone v3 names and the v2 `publicURL` style of `OS_ENDPOINT_TYPE`.
    fn parse(s: &str) -> Option<Interface> {
        match s
            .trim()
            .trim_end_matches("URL")
            .to_ascii_lowercase()
            .as_str()
        {
            "public" => Some(Interface::Public),
            "internal" => Some(Interface::Internal),
            "admin" => Some(Interface::Admin),
            _ => None,
        }
    }
}

/// Where one value of a profile came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Env(String),
    /// Filled in by kos (e.g. the `default` domain).
    Default,
    /// Set by code (a profile built from a cloud.conf or by hand).
    Explicit,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Env(v) => write!(f, "${v}"),
            Source::Default => f.write_str("default"),
            Source::Explicit => f.write_str("set by the caller"),
        }
    }
}

/// Everything needed to open a [`Session`](crate::Session) against one cloud.
#[derive(Debug, Clone)]
pub struct CloudProfile {
    /// The cloud's name in clouds.yaml, or `envvars` for `OS_*` variables.
    pub name: String,
    pub auth_url: String,
    pub auth: ProfileAuth,
    pub region_name: Option<String>,
    pub interface: Interface,
    /// A CA bundle (PEM) to trust in addition to the system's.
    pub cacert: Option<PathBuf>,
    /// `false` turns TLS verification off (`verify: false`, `insecure: true`, `OS_INSECURE`).
    pub verify: bool,
    /// How long one HTTP request may take (`api_timeout` in clouds.yaml, seconds); the SDK's 30 s
    /// when unset.
    pub api_timeout: Option<std::time::Duration>,
    /// Field name (`auth_url`, `password`, `project_name`, …) → where its value came from.
    pub sources: BTreeMap<String, Source>,
}

impl CloudProfile {
    /// A profile built by code (e.g. from a cloud.conf `[Global]` section).
    pub fn new(name: impl Into<String>, auth_url: impl Into<String>, auth: ProfileAuth) -> Self {
        CloudProfile {
            name: name.into(),
            auth_url: auth_url.into(),
            auth,
            region_name: None,
            interface: Interface::Public,
            cacert: None,
            verify: true,
            api_timeout: None,
            sources: BTreeMap::new(),
        }
    }

    /// Where a field's value came from (`Explicit` for anything not recorded).
    pub fn source(&self, field: &str) -> &Source {
        self.sources.get(field).unwrap_or(&Source::Explicit)
    }

    /// The usual resolution: the cloud named by `cloud` or `OS_CLOUD` from clouds.yaml (`file`, or
    /// the standard search path), else `OS_*` variables, else — when `file` holds exactly one
    /// cloud — that one.
    pub fn load(env: &Env, cloud: Option<&str>, file: Option<&Path>) -> Result<Self, CloudError> {
        if let Some(name) = cloud {
            return Self::from_clouds_yaml(env, name, file);
        }
        if let Some(name) = env.get("OS_CLOUD") {
            let mut p = Self::from_clouds_yaml(env, name, file)?;
            p.sources
                .insert("cloud".into(), Source::Env("OS_CLOUD".into()));
            return Ok(p);
        }
        if let Some(path) = file {
            let doc = CloudsDoc::read(path)?;
            let names = doc.cloud_names();
            return match names.as_slice() {
                [only] => Self::from_clouds_yaml(env, only, Some(path)),
                _ => Err(CloudError::Config(format!(
                    "{} defines {} clouds ({}): name one with OS_CLOUD or the --os-cloud option",
                    path.display(),
                    names.len(),
                    names.join(", ")
                ))),
            };
        }
        if env.get("OS_AUTH_URL").is_some() {
            return Self::from_env(env);
        }
        let hint = match find_first(&clouds_candidates(env)?) {
            Some(p) => format!(
                "; {} defines: {}",
                p.display(),
                CloudsDoc::read(&p)
                    .map(|d| d.cloud_names().join(", "))
                    .unwrap_or_else(|e| e.to_string())
            ),
            None => String::new(),
        };
        Err(CloudError::Config(format!(
            "OS_AUTH_URL is not set: source your openrc file or set OS_CLOUD{hint}"
        )))
    }

    /// The clouds.yaml on the search path that defines cloud `name`, if any (`None`: no clouds.yaml,
    /// or it has no such cloud). Lets a caller give a name a default meaning that a user's own
    /// clouds.yaml can still override.
    pub fn defined_in(env: &Env, name: &str) -> Result<Option<PathBuf>, CloudError> {
        let Some(path) = find_first(&clouds_candidates(env)?) else {
            return Ok(None);
        };
        let doc = CloudsDoc::read(&path)?;
        Ok(doc.cloud(name).is_some().then_some(path))
    }

    /// The cloud `name` from clouds.yaml (`file`, `OS_CLIENT_CONFIG_FILE` or the standard search
    /// path), with secure.yaml (`OS_CLIENT_SECURE_FILE`, next to clouds.yaml, or the standard search
    /// path) merged over it.
    pub fn from_clouds_yaml(
        env: &Env,
        name: &str,
        file: Option<&Path>,
    ) -> Result<Self, CloudError> {
        let clouds_path = match file {
            Some(p) => p.to_path_buf(),
            None => {
                let candidates = clouds_candidates(env)?;
                find_first(&candidates).ok_or_else(|| {
                    CloudError::Config(format!(
                        "cloud '{name}' requested but no clouds.yaml found (looked for {}): create one, \
                         or unset OS_CLOUD and source an openrc file",
                        candidates
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?
            }
        };
        let clouds = CloudsDoc::read(&clouds_path)?;
        let secure = match find_first(&secure_candidates(env, &clouds_path)) {
            Some(p) if p != clouds_path => Some(CloudsDoc::read(&p)?),
            _ => None,
        };
        if clouds.cloud(name).is_none() && secure.as_ref().and_then(|s| s.cloud(name)).is_none() {
            return Err(CloudError::Config(format!(
                "cloud '{name}' not found in {}; clouds defined there: {}",
                clouds_path.display(),
                clouds.cloud_names().join(", ")
            )));
        }
        let lookup = YamlLookup {
            name,
            clouds: &clouds,
            secure: secure.as_ref(),
        };
        build(name, &lookup)
    }

    /// The cloud `name` from a clouds.yaml given as text (an operator's: a Secret's `clouds.yaml`
    /// key); `shown` names it in messages. No secure.yaml is merged, and a `cacert` path in it is
    /// read from this machine as it names it.
    pub fn from_clouds_text(shown: &str, text: &str, name: &str) -> Result<Self, CloudError> {
        let clouds = CloudsDoc::parse(Path::new(shown), text)?;
        if clouds.cloud(name).is_none() {
            return Err(CloudError::Config(format!(
                "cloud '{name}' not found in {shown}; clouds defined there: {}",
                clouds.cloud_names().join(", ")
            )));
        }
        let lookup = YamlLookup {
            name,
            clouds: &clouds,
            secure: None,
        };
        build(name, &lookup)
    }

    /// Bare `OS_*` variables, as an openrc file sets them.
    pub fn from_env(env: &Env) -> Result<Self, CloudError> {
        build("envvars", &EnvLookup(env))
    }
}

/// One value looked up by canonical field name (`auth_url`, `username`, `region_name`, …).
trait Lookup {
    fn get(&self, field: &'static str) -> Option<(String, Source)>;
    /// The error for a required field that is missing, naming the place and the fix.
    fn missing(&self, field: &'static str, why: &str) -> String;
}

struct Builder<'a, L: Lookup> {
    lookup: &'a L,
    sources: BTreeMap<String, Source>,
}

impl<L: Lookup> Builder<'_, L> {
    fn opt(&mut self, field: &'static str) -> Option<String> {
        let (v, src) = self.lookup.get(field)?;
        self.sources.insert(field.into(), src);
        Some(v)
    }

    fn req(&mut self, field: &'static str, why: &str) -> Result<String, CloudError> {
        self.opt(field)
            .ok_or_else(|| CloudError::Config(self.lookup.missing(field, why)))
    }

    fn id_or_name(&mut self, id: &'static str, name: &'static str) -> Option<IdOrName> {
        self.opt(id)
            .map(IdOrName::Id)
            .or_else(|| self.opt(name).map(IdOrName::Name))
    }

    fn bool(&mut self, field: &'static str) -> Result<Option<bool>, CloudError> {
        let Some(v) = self.opt(field) else {
            return Ok(None);
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Ok(Some(true)),
            "false" | "no" | "0" | "off" => Ok(Some(false)),
            _ => Err(CloudError::Config(format!(
                "{field} from {} must be true or false, not '{v}'",
                self.sources
                    .get(field)
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ))),
        }
    }

    /// A user's or project's domain: its own, else the generic `domain_*`, else `default` when the
    /// user or project is given by name (what python-openstackclient's `--os-default-domain` does).
    fn domain(
        &mut self,
        prefix: &'static str,
        id: &'static str,
        name: &'static str,
        needs_domain: bool,
    ) -> Option<IdOrName> {
        self.id_or_name(id, name)
            .or_else(|| {
                let generic = self.id_or_name("domain_id", "domain_name");
                if let Some(src) = self
                    .sources
                    .get("domain_id")
                    .or(self.sources.get("domain_name"))
                    .cloned()
                {
                    self.sources.insert(format!("{prefix}_domain"), src);
                }
                generic
            })
            .or_else(|| {
                needs_domain.then(|| {
                    self.sources
                        .insert(format!("{prefix}_domain"), Source::Default);
                    IdOrName::Id("default".into())
                })
            })
    }
}

fn build(name: &str, lookup: &impl Lookup) -> Result<CloudProfile, CloudError> {
    let mut b = Builder {
        lookup,
        sources: BTreeMap::new(),
    };
    let auth_url = b.req(
        "auth_url",
        "it is Keystone's URL, e.g. https://keystone.example.com:5000/v3",
    )?;
    let auth_type = b.opt("auth_type");
    let app_cred = match auth_type
        .as_deref()
        .map(|t| t.to_ascii_lowercase().replace(['_', '-'], ""))
    {
        None => lookup.get("application_credential_secret").is_some(),
        Some(t) if t == "password" || t == "v3password" => false,
        Some(t) if t == "v3applicationcredential" || t == "applicationcredential" => true,
        Some(_) => {
            return Err(CloudError::Config(format!(
                "auth_type '{}' from {} is not supported by kos: use password or v3applicationcredential",
                auth_type.unwrap_or_default(),
                b.sources["auth_type"]
            )));
        }
    };
    let auth = if app_cred {
        let secret = b.req(
            "application_credential_secret",
            "it is shown once when the application credential is created",
        )?;
        let credential = match b.opt("application_credential_id") {
            Some(id) => AppCredentialRef::Id(id),
            None => {
                let cname = b.req(
                    "application_credential_name",
                    "give the credential's id, or its name and its user",
                )?;
                let user = b.id_or_name("user_id", "username").ok_or_else(|| {
                    CloudError::Config(lookup.missing(
                        "username",
                        "an application credential given by name needs its user",
                    ))
                })?;
                let needs = matches!(user, IdOrName::Name(_));
                let user_domain = b.domain("user", "user_domain_id", "user_domain_name", needs);
                AppCredentialRef::Name {
                    name: cname,
                    user,
                    user_domain,
                }
            }
        };
        ProfileAuth::ApplicationCredential {
            credential,
            secret: SecretString::from(secret),
        }
    } else {
        let user = b.id_or_name("user_id", "username").ok_or_else(|| {
            CloudError::Config(lookup.missing("username", "password authentication needs a user"))
        })?;
        let password = b.req("password", "password authentication needs it")?;
        let needs_user_domain = matches!(user, IdOrName::Name(_));
        let user_domain = b.domain(
            "user",
            "user_domain_id",
            "user_domain_name",
            needs_user_domain,
        );
        let project = b.id_or_name("project_id", "project_name");
        let needs_project_domain = matches!(project, Some(IdOrName::Name(_)));
        let project_domain = b.domain(
            "project",
            "project_domain_id",
            "project_domain_name",
            needs_project_domain,
        );
        ProfileAuth::Password {
            user,
            user_domain,
            password: SecretString::from(password),
            project,
            project_domain,
        }
    };
    let interface = match b.opt("interface") {
        None => Interface::Public,
        Some(s) => Interface::parse(&s).ok_or_else(|| {
            CloudError::Config(format!(
                "interface '{s}' from {} is not one of public, internal, admin",
                b.sources["interface"]
            ))
        })?,
    };
    let verify = match (b.bool("verify")?, b.bool("insecure")?) {
        (Some(v), _) => v,
        (None, Some(insecure)) => !insecure,
        (None, None) => true,
    };
    let api_timeout = match b.opt("api_timeout") {
        None => None,
        Some(t) => Some(
            t.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(std::time::Duration::from_secs_f64)
                .ok_or_else(|| {
                    CloudError::Config(format!(
                        "api_timeout '{t}' from {} is not a positive number of seconds",
                        b.sources["api_timeout"]
                    ))
                })?,
        ),
    };
    Ok(CloudProfile {
        name: name.to_owned(),
        auth_url,
        auth,
        region_name: b.opt("region_name"),
        interface,
        cacert: b.opt("cacert").map(PathBuf::from),
        verify,
        api_timeout,
        sources: b.sources,
    })
}

struct EnvLookup<'a>(&'a Env);

/// The `OS_*` variables for each field, first wins.
fn env_vars(field: &str) -> &'static [&'static str] {
    match field {
        "auth_url" => &["OS_AUTH_URL"],
        "auth_type" => &["OS_AUTH_TYPE"],
        "username" => &["OS_USERNAME"],
        "user_id" => &["OS_USER_ID"],
        "password" => &["OS_PASSWORD"],
        "project_name" => &["OS_PROJECT_NAME", "OS_TENANT_NAME"],
        "project_id" => &["OS_PROJECT_ID", "OS_TENANT_ID"],
        "user_domain_name" => &["OS_USER_DOMAIN_NAME"],
        "user_domain_id" => &["OS_USER_DOMAIN_ID"],
        "project_domain_name" => &["OS_PROJECT_DOMAIN_NAME"],
        "project_domain_id" => &["OS_PROJECT_DOMAIN_ID"],
        "domain_name" => &["OS_DOMAIN_NAME"],
        "domain_id" => &["OS_DOMAIN_ID"],
        "region_name" => &["OS_REGION_NAME"],
        "interface" => &["OS_INTERFACE", "OS_ENDPOINT_TYPE"],
        "cacert" => &["OS_CACERT"],
        "insecure" => &["OS_INSECURE"],
        "api_timeout" => &["OS_API_TIMEOUT"],
        "application_credential_id" => &["OS_APPLICATION_CREDENTIAL_ID"],
        "application_credential_name" => &["OS_APPLICATION_CREDENTIAL_NAME"],
        "application_credential_secret" => &["OS_APPLICATION_CREDENTIAL_SECRET"],
        _ => &[],
    }
}

impl Lookup for EnvLookup<'_> {
    fn get(&self, field: &'static str) -> Option<(String, Source)> {
        env_vars(field)
            .iter()
            .find_map(|var| Some((self.0.get(var)?.to_owned(), Source::Env((*var).into()))))
    }

    fn missing(&self, field: &'static str, why: &str) -> String {
        let var = env_vars(field).first().copied().unwrap_or("OS_?");
        match field {
            "auth_url" => format!("{var} is not set: source your openrc file or set OS_CLOUD"),
            "password" => format!(
                "{var} is not set ({why}): source your openrc file (it prompts for the password) or export {var}"
            ),
            _ => format!("{var} is not set ({why}): set it in your openrc file"),
        }
    }
}

/// A parsed clouds.yaml or secure.yaml.
struct CloudsDoc {
    path: PathBuf,
    doc: Value,
}

impl CloudsDoc {
    fn read(path: &Path) -> Result<CloudsDoc, CloudError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CloudError::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(path, &text)
    }

    /// `path` only names the document in messages.
    fn parse(path: &Path, text: &str) -> Result<CloudsDoc, CloudError> {
        // The parser's message may quote the offending line, which may hold a password: report
        // only where the problem is.
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| {
            let msg = e.to_string();
            let place = msg
                .lines()
                .find(|l| l.contains("line"))
                .map(|l| l.trim().to_owned())
                .unwrap_or_default();
            CloudError::Config(format!(
                "{} is not valid YAML {place}: fix the syntax (check indentation and quoting)",
                path.display()
            ))
        })?;
        Ok(CloudsDoc {
            path: path.to_path_buf(),
            doc,
        })
    }

    fn cloud(&self, name: &str) -> Option<&Value> {
        self.doc.get("clouds")?.get(name)
    }

    fn cloud_names(&self) -> Vec<String> {
        match self.doc.get("clouds").and_then(Value::as_object) {
            Some(m) => m.keys().cloned().collect(),
            None => Vec::new(),
        }
    }
}

struct YamlLookup<'a> {
    name: &'a str,
    clouds: &'a CloudsDoc,
    secure: Option<&'a CloudsDoc>,
}

/// Fields that live under `auth:` in clouds.yaml; everything else is at the cloud's top level.
fn yaml_path(field: &str) -> (&'static str, &str) {
    const TOP: [&str; 7] = [
        "auth_type",
        "region_name",
        "interface",
        "cacert",
        "verify",
        "insecure",
        "api_timeout",
    ];
    if TOP.contains(&field) {
        ("", field)
    } else {
        ("auth", field)
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Lookup for YamlLookup<'_> {
    fn get(&self, field: &'static str) -> Option<(String, Source)> {
        let (section, key) = yaml_path(field);
        self.secure
            .into_iter()
            .chain([self.clouds])
            .find_map(|doc| {
                let cloud = doc.cloud(self.name)?;
                let holder = if section.is_empty() {
                    cloud
                } else {
                    cloud.get(section)?
                };
                let v = holder.get(key).or_else(|| {
                    // `endpoint_type` is the older spelling of `interface`.
                    (field == "interface")
                        .then(|| cloud.get("endpoint_type"))
                        .flatten()
                })?;
                Some((scalar(v)?, Source::File(doc.path.clone())))
            })
    }

    fn missing(&self, field: &'static str, why: &str) -> String {
        let (section, key) = yaml_path(field);
        let dotted = if section.is_empty() {
            key.to_owned()
        } else {
            format!("{section}.{key}")
        };
        let place = self.clouds.path.display();
        let mut msg = format!("{dotted} missing for cloud '{}' in {place}", self.name);
        if field == "auth_url"
            && let Some(profile) = self.clouds.cloud(self.name).and_then(|c| c.get("profile"))
        {
            msg.push_str(&format!(
                " (vendor profiles such as {profile} are not supported: copy its auth_url into clouds.yaml)"
            ));
        }
        if matches!(field, "password" | "application_credential_secret") {
            msg.push_str(": put it in secure.yaml next to clouds.yaml");
        } else {
            msg.push_str(&format!(
                ": add it under clouds.{}.{dotted} ({why})",
                self.name
            ));
        }
        msg
    }
}

/// Where clouds.yaml is looked for. A file named by `OS_CLIENT_CONFIG_FILE` must exist: quietly
/// looking elsewhere (or falling back to another cloud) would run against a cloud nobody named.
fn clouds_candidates(env: &Env) -> Result<Vec<PathBuf>, CloudError> {
    if let Some(f) = env.get("OS_CLIENT_CONFIG_FILE") {
        let path = PathBuf::from(f);
        if !path.is_file() {
            return Err(CloudError::Config(format!(
                "$OS_CLIENT_CONFIG_FILE names {}, which {}: fix the path, or unset \
                 OS_CLIENT_CONFIG_FILE to use the clouds.yaml on the search path",
                path.display(),
                if path.exists() {
                    "is not a file"
                } else {
                    "does not exist"
                }
            )));
        }
        return Ok(vec![path]);
    }
    Ok(with_names(env.config_dirs(), "clouds"))
}

/// secure.yaml: `OS_CLIENT_SECURE_FILE`, else the one next to clouds.yaml, else the search path.
fn secure_candidates(env: &Env, clouds: &Path) -> Vec<PathBuf> {
    if let Some(f) = env.get("OS_CLIENT_SECURE_FILE") {
        return vec![PathBuf::from(f)];
    }
    let mut dirs: Vec<PathBuf> = clouds.parent().map(Path::to_path_buf).into_iter().collect();
    dirs.extend(env.config_dirs());
    with_names(dirs, "secure")
}

fn with_names(dirs: Vec<PathBuf>, stem: &str) -> Vec<PathBuf> {
    dirs.iter()
        .flat_map(|d| {
            [
                d.join(format!("{stem}.yaml")),
                d.join(format!("{stem}.yml")),
            ]
        })
        .collect()
}

fn find_first(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|p| p.is_file()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    const CLOUDS: &str = "clouds:
  prod:
    auth:
      auth_url: https://keystone.example:5000/v3
      username: alice
      project_name: k8s
      user_domain_name: Users
    region_name: RegionTwo
    interface: internal
    cacert: /etc/ssl/ca.pem
  lab:
    auth:
      auth_url: http://lab:5000/v3
      application_credential_id: ac123
      application_credential_secret: labsecret
    auth_type: v3applicationcredential
    verify: false
";

    #[test]
    fn clouds_yaml_given_as_text() {
        let p = CloudProfile::from_clouds_text("Secret ns/cloud", CLOUDS, "lab").expect("profile");
        assert_eq!(p.auth_url, "http://lab:5000/v3");
        assert!(!p.verify);
        let ProfileAuth::ApplicationCredential { secret, .. } = &p.auth else {
            panic!("{:?}", p.auth);
        };
        assert_eq!(secret.expose_secret(), "labsecret");
        let e = CloudProfile::from_clouds_text("Secret ns/cloud", CLOUDS, "nope")
            .expect_err("no such cloud")
            .to_string();
        assert!(
            e.contains("Secret ns/cloud") && e.contains("lab, prod"),
            "{e}"
        );
        // A broken document's message says where, never the line (it may hold a password).
        let e = CloudProfile::from_clouds_text(
            "Secret ns/cloud",
            "clouds:\n  lab:\n    auth: {password: hunter2-secret\n",
            "lab",
        )
        .expect_err("invalid yaml")
        .to_string();
        assert!(
            e.contains("not valid YAML") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn clouds_yaml_with_secure_yaml() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clouds = write(dir.path(), "clouds.yaml", CLOUDS);
        let secure = write(
            dir.path(),
            "secure.yaml",
            "clouds:\n  prod:\n    auth:\n      password: s3cret-pw\n",
        );
        let env =
            Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("etc"));
        let p = CloudProfile::load(&env, Some("prod"), Some(&clouds)).expect("profile");
        assert_eq!(p.name, "prod");
        assert_eq!(p.auth_url, "https://keystone.example:5000/v3");
        assert_eq!(p.region_name.as_deref(), Some("RegionTwo"));
        assert_eq!(p.interface, Interface::Internal);
        assert_eq!(p.cacert, Some(PathBuf::from("/etc/ssl/ca.pem")));
        assert!(p.verify);
        let ProfileAuth::Password {
            user,
            user_domain,
            password,
            project,
            project_domain,
        } = &p.auth
        else {
            panic!("password auth expected")
        };
        assert_eq!(user, &IdOrName::Name("alice".into()));
        assert_eq!(user_domain, &Some(IdOrName::Name("Users".into())));
        assert_eq!(password.expose_secret(), "s3cret-pw");
        assert_eq!(project, &Some(IdOrName::Name("k8s".into())));
        assert_eq!(project_domain, &Some(IdOrName::Id("default".into())));
        assert_eq!(p.source("password"), &Source::File(secure));
        assert_eq!(p.source("auth_url"), &Source::File(clouds));
        assert_eq!(p.source("project_domain"), &Source::Default);
        let dbg = format!("{p:?}");
        assert!(!dbg.contains("s3cret-pw"), "{dbg}");
    }

    #[test]
    fn app_credential_cloud_and_os_cloud() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "clouds.yaml", CLOUDS);
        // Found through ./clouds.yaml and OS_CLOUD.
        let env = Env::from_vars([("OS_CLOUD", "lab")])
            .with_cwd(dir.path())
            .with_system_dir(dir.path().join("etc"));
        let p = CloudProfile::load(&env, None, None).expect("profile");
        assert_eq!(p.name, "lab");
        assert!(!p.verify);
        assert_eq!(p.source("cloud"), &Source::Env("OS_CLOUD".into()));
        let ProfileAuth::ApplicationCredential { credential, secret } = &p.auth else {
            panic!("app cred expected")
        };
        assert_eq!(credential, &AppCredentialRef::Id("ac123".into()));
        assert_eq!(secret.expose_secret(), "labsecret");
        assert!(!format!("{p:?}").contains("labsecret"));
    }

    #[test]
    fn errors_name_file_and_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clouds = write(dir.path(), "clouds.yaml", CLOUDS);
        let env =
            Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("etc"));
        let e = CloudProfile::load(&env, Some("staging"), Some(&clouds))
            .expect_err("missing cloud")
            .to_string();
        assert_eq!(
            e,
            format!(
                "cloud 'staging' not found in {}; clouds defined there: lab, prod",
                clouds.display()
            )
        );
        // prod has no password and there is no secure.yaml.
        let e = CloudProfile::load(&env, Some("prod"), Some(&clouds))
            .expect_err("no password")
            .to_string();
        assert!(
            e.starts_with("auth.password missing for cloud 'prod' in "),
            "{e}"
        );
        assert!(
            e.ends_with("put it in secure.yaml next to clouds.yaml"),
            "{e}"
        );

        let two = write(dir.path(), "two.yaml", "clouds:\n  a: {}\n  b: {}\n");
        let e = CloudProfile::load(&env, None, Some(&two))
            .expect_err("ambiguous")
            .to_string();
        assert!(e.contains("defines 2 clouds (a, b)"), "{e}");
        let e = CloudProfile::load(&env, Some("a"), Some(&two))
            .expect_err("no auth_url")
            .to_string();
        assert!(e.starts_with("auth.auth_url missing for cloud 'a'"), "{e}");

        let bad = write(dir.path(), "bad.yaml", "clouds:\n  a: [\n   password: x\n");
        let e = CloudProfile::load(&env, Some("a"), Some(&bad))
            .expect_err("bad yaml")
            .to_string();
        assert!(e.contains("is not valid YAML"), "{e}");

        let e = CloudProfile::load(&env, None, None)
            .expect_err("nothing")
            .to_string();
        assert_eq!(
            e,
            "OS_AUTH_URL is not set: source your openrc file or set OS_CLOUD"
        );

        let env2 = Env::from_vars([("OS_CLOUD", "x")]).with_system_dir(dir.path().join("etc"));
        let e = CloudProfile::load(&env2, None, None)
            .expect_err("no clouds.yaml")
            .to_string();
        assert!(
            e.contains("cloud 'x' requested but no clouds.yaml found"),
            "{e}"
        );
    }

    /// Issue 12: a clouds.yaml named by OS_CLIENT_CONFIG_FILE that does not exist is an error, not
    /// a quiet switch to another clouds.yaml or to none (`kos --cloud sim` then ran the embedded
    /// simulator).
    #[test]
    fn a_missing_os_client_config_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "clouds.yaml", CLOUDS);
        let missing = dir.path().join("gone.yaml");
        let env = Env::from_vars([("OS_CLIENT_CONFIG_FILE", missing.to_str().expect("utf8"))])
            .with_cwd(dir.path())
            .with_system_dir(dir.path().join("etc"));
        let expected = format!(
            "$OS_CLIENT_CONFIG_FILE names {}, which does not exist: fix the path, or unset \
             OS_CLIENT_CONFIG_FILE to use the clouds.yaml on the search path",
            missing.display()
        );
        let e = CloudProfile::defined_in(&env, "sim").expect_err("named file missing");
        assert_eq!(e.to_string(), expected);
        let e = CloudProfile::load(&env, Some("lab"), None).expect_err("named file missing");
        assert_eq!(e.to_string(), expected);
        let e = CloudProfile::load(&env, None, None).expect_err("named file missing");
        assert_eq!(e.to_string(), expected);
    }

    #[test]
    fn ca_bundles_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = check_ca_bundle(&dir.path().join("none.pem")).expect_err("missing");
        assert_eq!(e, "does not exist");
        let text = write(dir.path(), "t.pem", "hello\n");
        assert!(
            check_ca_bundle(&text)
                .expect_err("text")
                .contains("holds no `-----BEGIN CERTIFICATE-----` block")
        );
        let bad = write(
            dir.path(),
            "b.pem",
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
        );
        assert!(
            check_ca_bundle(&bad)
                .expect_err("bad body")
                .contains("not a certificate")
        );
        // A DER SEQUENCE, as every certificate starts.
        let ok = write(
            dir.path(),
            "ok.pem",
            "junk\n-----BEGIN CERTIFICATE-----\nMIIBCgKCAQEA\n-----END CERTIFICATE-----\n",
        );
        assert_eq!(check_ca_bundle(&ok), Ok(1));
        let bin = dir.path().join("der.crt");
        std::fs::write(&bin, [0x30u8, 0x82, 0xff, 0xfe, 0x00]).expect("write");
        assert!(
            check_ca_bundle(&bin)
                .expect_err("binary")
                .contains("openssl x509")
        );
    }

    #[test]
    fn openrc_password() {
        let env = Env::from_vars([
            ("OS_AUTH_URL", "https://k:5000/v3"),
            ("OS_USERNAME", "bob"),
            ("OS_PASSWORD", "pw-from-env"),
            ("OS_TENANT_NAME", "legacy"),
            ("OS_DOMAIN_NAME", "Corp"),
            ("OS_REGION_NAME", "R1"),
            ("OS_ENDPOINT_TYPE", "internalURL"),
            ("OS_INSECURE", "true"),
            ("OS_CACERT", ""),
        ]);
        let p = CloudProfile::load(&env, None, None).expect("profile");
        assert_eq!(p.name, "envvars");
        assert_eq!(p.interface, Interface::Internal);
        assert!(!p.verify);
        assert_eq!(p.cacert, None);
        assert_eq!(
            p.source("project_name"),
            &Source::Env("OS_TENANT_NAME".into())
        );
        let ProfileAuth::Password {
            user_domain,
            project,
            project_domain,
            ..
        } = &p.auth
        else {
            panic!("password")
        };
        assert_eq!(user_domain, &Some(IdOrName::Name("Corp".into())));
        assert_eq!(project_domain, &Some(IdOrName::Name("Corp".into())));
        assert_eq!(project, &Some(IdOrName::Name("legacy".into())));
        assert!(!format!("{p:?}").contains("pw-from-env"));
    }

    #[test]
    fn openrc_app_credential_by_name_and_errors() {
        let env = Env::from_vars([
            ("OS_AUTH_URL", "https://k:5000/v3"),
            ("OS_AUTH_TYPE", "v3applicationcredential"),
            ("OS_APPLICATION_CREDENTIAL_NAME", "kos"),
            ("OS_APPLICATION_CREDENTIAL_SECRET", "acs"),
            ("OS_USER_ID", "u1"),
        ]);
        let p = CloudProfile::from_env(&env).expect("profile");
        let ProfileAuth::ApplicationCredential { credential, .. } = &p.auth else {
            panic!("app cred")
        };
        assert_eq!(
            credential,
            &AppCredentialRef::Name {
                name: "kos".into(),
                user: IdOrName::Id("u1".into()),
                user_domain: None
            }
        );

        let e = CloudProfile::from_env(&Env::from_vars([
            ("OS_AUTH_URL", "https://k:5000/v3"),
            ("OS_USERNAME", "bob"),
        ]))
        .expect_err("no password")
        .to_string();
        assert!(e.starts_with("OS_PASSWORD is not set"), "{e}");
        let e = CloudProfile::from_env(&Env::from_vars([
            ("OS_AUTH_URL", "https://k:5000/v3"),
            ("OS_AUTH_TYPE", "v3oidcpassword"),
        ]))
        .expect_err("unsupported")
        .to_string();
        assert!(e.contains("$OS_AUTH_TYPE"), "{e}");
        let e = CloudProfile::from_env(&Env::from_vars([
            ("OS_AUTH_URL", "https://k:5000/v3"),
            ("OS_USERNAME", "bob"),
            ("OS_PASSWORD", "x"),
            ("OS_INTERFACE", "privateURL"),
        ]))
        .expect_err("bad interface")
        .to_string();
        assert!(e.contains("$OS_INTERFACE"), "{e}");
    }
}
