//! An authenticated connection to one cloud: one token shared by every call (and every clone), the
//! catalog discovered once, the call counters, and the secrets to redact.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openstack_sdk::AsyncOpenStack;
use openstack_sdk::api::AsyncClient;
use openstack_sdk::config::{Auth, CloudConfig};
use secrecy::SecretString;

use crate::config::{AppCredentialRef, CloudProfile, Env, IdOrName, ProfileAuth};
use crate::connect;
use crate::counters::{CallCounters, CallCounts, CallObserver};
use crate::error::CloudError;
use crate::rate_limit::RateLimiter;
use crate::redact::Redactor;
use crate::request::ServiceKind;
use crate::retry::{Budget, RetryPolicy, RetrySlots};

/// What discovery found for a service. A missing or broken service is only an error when used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    Ready,
    /// Not in the catalog (for this region and interface).
    Missing,
    /// In the catalog, but version discovery failed.
    Broken(String),
}

// Sessions are shared across tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Session>();
};

/// A connected session. Cheap to clone (an `Arc` inside); clones share the token, counters and
/// redactor. `Send + Sync`.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
    policy: RetryPolicy,
    pub(crate) observer: Option<Arc<dyn CallObserver>>,
    pub(crate) limiter: Option<Arc<RateLimiter>>,
}

pub(crate) struct Inner {
    pub(crate) client: AsyncOpenStack,
    pub(crate) counters: CallCounters,
    cloud: String,
    auth_url: String,
    interface: &'static str,
    region: Option<String>,
    user_id: String,
    project_id: String,
    services: BTreeMap<ServiceKind, ServiceState>,
    redactor: Redactor,
    /// clouds.yaml's `cacert`: what in-cluster clients need to trust the cloud too.
    cacert: Option<std::path::PathBuf>,
    /// The token's endpoints. Each attempt holds a read guard while it is on the wire;
    /// re-authenticating and rediscovering take the write guard. Re-authenticating makes the SDK
    /// forget every discovered endpoint until discovery runs again, and a call sent in between
    /// would go to an unversioned URL (404, 406, 300): the lock makes that window unobservable.
    /// (The SDK's own 401 replay is switched off for the same reason.)
    pub(crate) endpoints: tokio::sync::RwLock<Endpoints>,
    /// When the retries of every call of this session (and its clones) are due.
    retry_slots: std::sync::Mutex<RetrySlots>,
    /// How fast the cloud's clock runs, from the `Date` of its answers.
    pub(crate) pace: crate::pace::Pace,
}

/// What a session knows of its token and of the endpoints discovered with it.
#[derive(Debug, Default)]
pub(crate) struct Endpoints {
    /// Bumped by every re-authentication.
    pub(crate) epoch: u64,
    /// Services whose endpoint must be discovered again before the next call to them: discovery
    /// after a re-authentication failed for them (a 503 from a busy cloud, say).
    pub(crate) undiscovered: BTreeSet<ServiceKind>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner;
        f.debug_struct("Session")
            .field("cloud", &i.cloud)
            .field("auth_url", &i.auth_url)
            .field("region", &i.region)
            .field("interface", &i.interface)
            .field("user_id", &i.user_id)
            .field("project_id", &i.project_id)
            .field("services", &i.services)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Authenticates, then discovers every service kos uses.
    ///
    /// Discovery is not optional with this SDK: without it requests go to unversioned URLs (404,
    /// 406, 300). It runs for every session, the application-credential one included.
    pub async fn connect(profile: &CloudProfile) -> Result<Session, CloudError> {
        Self::connect_with(profile, RetryPolicy::default()).await
    }

    /// [`connect`](Self::connect) with `policy` for Keystone (429, 5xx, a connection lost) and for
    /// every call of the session.
    pub async fn connect_with(
        profile: &CloudProfile,
        policy: RetryPolicy,
    ) -> Result<Session, CloudError> {
        // The SDK finds auth plugins through `inventory`; without a reference to this crate the
        // linker drops the application-credential plugin and that auth type is "unknown".
        let _ = std::hint::black_box(&openstack_sdk_auth_applicationcredential::ANCHOR);

        let mut secrets = profile_secrets(profile);
        secrets.extend(
            connect::url_password(&profile.auth_url)
                .into_iter()
                .map(SecretString::from),
        );
        let redactor = Redactor::new(secrets);
        let auth_url = connect::without_userinfo(&profile.auth_url);
        if auth_url != profile.auth_url {
            tracing::warn!(
                "auth_url (from {}) carries a user name or password, which Keystone does not take \
                 from the URL: they are not sent; remove them",
                profile.source("auth_url")
            );
        }
        if let Some(ca) = &profile.cacert {
            crate::config::check_ca_bundle(ca).map_err(|why| {
                CloudError::Config(format!(
                    "cacert {} (from {}) {why}: point it at the PEM file of the CA that signed \
                     Keystone's certificate, or remove it",
                    ca.display(),
                    profile.source("cacert")
                ))
            })?;
        }
        let config = cloud_config(profile, &auth_url)?;
        // The SDK's own `connect` runs discovery and the token request back to back and gives up
        // at the first failure: a Keystone allowing one request a second would always refuse the
        // second. Its steps, each retried on its own, get through.
        let mut client = AsyncOpenStack::new_impl(&config, openstack_sdk::auth::Auth::None)
            .map_err(|e| {
                CloudError::Config(redactor.redact(&format!(
                    "cloud '{}': {}",
                    profile.name,
                    crate::request::error_chain(&e)
                )))
            })?;
        let mut budget = Budget::default();
        let mut step = ConnectStep::Discover;
        while step != ConnectStep::Done {
            budget.attempts += 1;
            let result = match step {
                ConnectStep::Discover => client
                    .discover_service_endpoint(&ServiceKind::Identity.sdk())
                    .await
                    .map(|()| ConnectStep::Authorize),
                ConnectStep::Authorize | ConnectStep::Done => {
                    Box::pin(client.authorize(None, false, false))
                        .await
                        .map(|()| ConnectStep::Done)
                }
            };
            let e = match result {
                Ok(next) => {
                    step = next;
                    continue;
                }
                Err(e) => e,
            };
            let failed = connect::diagnose(profile, &redactor, &e).await;
            let retry = failed.retry.and_then(|(reason, retry_after)| {
                budget
                    .retry(&policy, reason, retry_after, &mut rand::rng())
                    .map(|wait| (reason, wait))
            });
            let Some((reason, wait)) = retry else {
                return Err(failed.error);
            };
            tracing::debug!(attempt = budget.attempts, ?reason, error = %failed.error, "connecting to Keystone failed; retrying");
            tokio::time::sleep(wait).await;
        }
        client.disable_auth_cache();
        // 401s come back to `Session::send`, which re-authenticates and rediscovers under
        // `auth_epoch`'s write lock (see there).
        client.set_max_auth_retries(0);
        if let Some(t) = client.get_auth_token() {
            redactor.set_token(t);
        }

        let info = client.get_auth_info().ok_or_else(|| {
            CloudError::Auth(format!(
                "cloud '{}': Keystone returned no token information",
                profile.name
            ))
        })?;
        let user_id = info.token.user.id.clone();
        let project_id = info
            .token
            .project
            .as_ref()
            .and_then(|p| p.id.clone())
            .ok_or_else(|| {
                CloudError::Auth(format!(
                    "cloud '{}': the token is not scoped to a project: set auth.project_name in \
                     clouds.yaml or OS_PROJECT_NAME",
                    profile.name
                ))
            })?;

        let services = discover(&client, &redactor, &CONNECT_DISCOVERY, &ServiceKind::ALL).await;
        tracing::debug!(cloud = %profile.name, ?services, "connected");

        Ok(Session {
            inner: Arc::new(Inner {
                client,
                counters: CallCounters::default(),
                cloud: profile.name.clone(),
                auth_url,
                interface: profile.interface.as_str(),
                region: profile.region_name.clone(),
                user_id,
                project_id,
                services,
                redactor,
                cacert: profile.cacert.clone(),
                endpoints: tokio::sync::RwLock::default(),
                retry_slots: std::sync::Mutex::default(),
                pace: crate::pace::Pace::default(),
            }),
            policy,
            observer: None,
            limiter: None,
        })
    }

    /// Connects to the cloud named by `cloud` or `OS_CLOUD` (clouds.yaml), else to the one that the
    /// `OS_*` variables describe.
    pub async fn from_env_or_clouds(cloud: Option<&str>) -> Result<Session, CloudError> {
        let profile = CloudProfile::load(&Env::process(), cloud, None)?;
        Self::connect(&profile).await
    }

    /// A snapshot of the calls sent so far (all clones of this session together).
    /// How fast the cloud's clock runs against this machine's ([`crate::pace`]): waits stated in
    /// the cloud's time are converted through it.
    pub fn pace(&self) -> &crate::pace::Pace {
        &self.inner.pace
    }

    pub fn counters(&self) -> CallCounts {
        self.inner.counters.snapshot()
    }

    /// Counts a retry a facade makes itself (one the request path cannot decide alone).
    pub(crate) fn record_retry(&self) {
        self.inner.counters.record_retry();
    }

    pub fn project_id(&self) -> &str {
        &self.inner.project_id
    }

    pub fn user_id(&self) -> &str {
        &self.inner.user_id
    }

    pub fn region(&self) -> Option<&str> {
        self.inner.region.as_deref()
    }

    /// The CA bundle the profile names (`cacert`), which in-cluster clients need as well.
    pub fn cacert(&self) -> Option<&std::path::Path> {
        self.inner.cacert.as_deref()
    }

    /// The Keystone URL the session authenticated against (what in-cluster clients get in cloud.conf).
    pub fn auth_url(&self) -> &str {
        &self.inner.auth_url
    }

    /// Authenticates again and rediscovers every endpoint, unless someone already did since
    /// `seen_epoch` (many calls see the same expired token; one re-authentication serves them all).
    /// No call is on the wire meanwhile: they all hold a read guard of `endpoints`.
    pub(crate) async fn reauthenticate(&self, seen_epoch: u64) -> Result<(), CloudError> {
        let mut endpoints = self.inner.endpoints.write().await;
        if endpoints.epoch != seen_epoch {
            return Ok(());
        }
        tracing::debug!("token rejected: authenticating again and rediscovering the endpoints");
        // A full login with the configured credentials, then discovery, which the new catalog
        // has forgotten. The SDK would first exchange the token it still holds (rejected when
        // revoked, and otherwise keeping the old expiry): forgetting it forces the login.
        self.inner.client.disable_auth_cache();
        // Keystone answering 429 or 503, or a connection lost, is waited out as any call's is.
        let mut budget = Budget::default();
        loop {
            budget.attempts += 1;
            let Err(e) = Box::pin(self.inner.client.authorize(None, false, true)).await else {
                break;
            };
            let retry = connect::reauth_retry(&e).and_then(|reason| {
                budget
                    .retry(&self.policy, reason, None, &mut rand::rng())
                    .map(|delay| (reason, delay))
            });
            let Some((reason, delay)) = retry else {
                return Err(CloudError::Auth(self.redact(&format!(
                    "cloud '{}': re-authentication failed: {}",
                    self.inner.cloud,
                    crate::request::error_chain(&e)
                ))));
            };
            let wait = self.schedule_retry(delay);
            tracing::debug!(
                attempt = budget.attempts,
                ?reason,
                "re-authentication failed; retrying"
            );
            tokio::time::sleep(wait).await;
        }
        if let Some(t) = self.inner.client.get_auth_token() {
            self.inner.redactor.set_token(t);
        }
        endpoints.epoch += 1;
        let in_use: Vec<ServiceKind> = self
            .inner
            .services
            .iter()
            .filter(|(_, state)| **state == ServiceState::Ready)
            .map(|(s, _)| *s)
            .collect();
        // Boxed: discovery is a large future, and inlining it would grow every `send` future by
        // as much (enough to overflow a test thread's stack in debug builds).
        let found = Box::pin(discover(
            &self.inner.client,
            &self.inner.redactor,
            &self.policy,
            &in_use,
        ))
        .await;
        endpoints.undiscovered = found
            .into_iter()
            .filter(|(s, state)| {
                let failed = *state != ServiceState::Ready;
                if failed {
                    tracing::warn!(service = %s, ?state, "version discovery failed after re-authentication; retried at the next call");
                }
                failed
            })
            .map(|(s, _)| s)
            .collect();
        Ok(())
    }

    /// Discovers `service` again if discovery after the last re-authentication failed for it.
    pub(crate) async fn rediscover(
        &self,
        service: ServiceKind,
        operation: &'static str,
    ) -> Result<(), CloudError> {
        let mut endpoints = self.inner.endpoints.write().await;
        if !endpoints.undiscovered.contains(&service) {
            return Ok(());
        }
        let found = Box::pin(discover(
            &self.inner.client,
            &self.inner.redactor,
            &self.policy,
            &[service],
        ))
        .await;
        match found.get(&service) {
            Some(ServiceState::Ready) => {
                endpoints.undiscovered.remove(&service);
                Ok(())
            }
            other => Err(CloudError::Transport {
                service,
                operation,
                detail: format!(
                    "the {service} endpoint could not be discovered after re-authentication: {}",
                    match other {
                        Some(ServiceState::Broken(why)) => why.as_str(),
                        _ => "not in the new token's catalog",
                    }
                ),
            }),
        }
    }

    /// When the current token expires (`send` re-authenticates on a 401 after that).
    pub fn token_expires_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.inner
            .client
            .get_auth_info()
            .map(|a| a.token.expires_at)
    }

    /// The names of the roles the current token carries on the project (implied ones included):
    /// what an application credential made by this session may be given.
    pub fn token_roles(&self) -> Vec<String> {
        self.inner
            .client
            .get_auth_info()
            .and_then(|a| a.token.roles)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    /// The cloud's name (clouds.yaml key, or `envvars`).
    pub fn cloud_name(&self) -> &str {
        &self.inner.cloud
    }

    /// What discovery found for a service.
    pub fn service_state(&self, s: ServiceKind) -> &ServiceState {
        self.inner
            .services
            .get(&s)
            .unwrap_or(&ServiceState::Missing)
    }

    /// Reports every attempt of this session (and of its clones made afterwards) to `o`.
    pub fn with_observer(mut self, o: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(o);
        self
    }

    /// Sends at most `per_second` requests per second on average (`burst` back to back), across
    /// this session and its clones made afterwards. `None` (or a non-positive rate): no limit.
    pub fn with_rate_limit(mut self, per_second: f64, burst: u32) -> Self {
        self.limiter = RateLimiter::new(per_second, burst).map(Arc::new);
        self
    }

    pub fn with_retry_policy(mut self, p: RetryPolicy) -> Self {
        self.policy = p;
        self
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The wait before a retry due `delay` from now, moved on to an instant no other retry of this
    /// session has (see [`RetrySlots`]).
    pub(crate) fn schedule_retry(&self, delay: std::time::Duration) -> std::time::Duration {
        let now = tokio::time::Instant::now();
        let at = self
            .inner
            .retry_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve(now, now + delay);
        at - now
    }

    /// The session's redactor: facades add secrets they learn (a created credential's secret).
    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    /// `text` with every secret of this session masked (the current token included).
    pub fn redact(&self, text: &str) -> String {
        if let Some(t) = self.inner.client.get_auth_token() {
            self.inner.redactor.set_token(t);
        }
        self.inner.redactor.redact(text)
    }

    /// An error for a call to a service that discovery did not find.
    pub(crate) fn check_service(
        &self,
        s: ServiceKind,
        operation: &'static str,
    ) -> Result<(), CloudError> {
        let where_ = format!(
            "cloud '{}' (region {}, interface {})",
            self.inner.cloud,
            self.inner.region.as_deref().unwrap_or("any"),
            self.inner.interface
        );
        match self.service_state(s) {
            ServiceState::Ready => Ok(()),
            ServiceState::Missing => Err(CloudError::Config(format!(
                "{operation} needs the {s} service, which is not in the catalog of {where_}: \
                 check region_name and interface, or ask the cloud operator"
            ))),
            ServiceState::Broken(why) => Err(CloudError::Config(format!(
                "{operation} needs the {s} service of {where_}, whose version discovery failed: {why}"
            ))),
        }
    }
}

fn profile_secrets(p: &CloudProfile) -> Vec<SecretString> {
    match &p.auth {
        ProfileAuth::Password { password, .. } => vec![password.clone()],
        ProfileAuth::ApplicationCredential { secret, .. } => vec![secret.clone()],
    }
}

/// Where [`Session::connect_with`] is in talking to Keystone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectStep {
    Discover,
    Authorize,
    Done,
}

/// The SDK's config for a profile, authenticating at `auth_url`.
fn cloud_config(p: &CloudProfile, auth_url: &str) -> Result<CloudConfig, CloudError> {
    let mut auth = Auth {
        auth_url: Some(auth_url.to_owned()),
        ..Default::default()
    };
    fn set(v: &Option<IdOrName>, id: &mut Option<String>, name: &mut Option<String>) {
        match v {
            Some(IdOrName::Id(x)) => *id = Some(x.clone()),
            Some(IdOrName::Name(x)) => *name = Some(x.clone()),
            None => {}
        }
    }
    let auth_type = match &p.auth {
        ProfileAuth::Password {
            user,
            user_domain,
            password,
            project,
            project_domain,
        } => {
            set(&Some(user.clone()), &mut auth.user_id, &mut auth.username);
            set(
                user_domain,
                &mut auth.user_domain_id,
                &mut auth.user_domain_name,
            );
            set(project, &mut auth.project_id, &mut auth.project_name);
            set(
                project_domain,
                &mut auth.project_domain_id,
                &mut auth.project_domain_name,
            );
            auth.password = Some(password.clone());
            "v3password"
        }
        ProfileAuth::ApplicationCredential { credential, secret } => {
            match credential {
                AppCredentialRef::Id(id) => auth.application_credential_id = Some(id.clone()),
                AppCredentialRef::Name {
                    name,
                    user,
                    user_domain,
                } => {
                    auth.application_credential_name = Some(name.clone());
                    set(&Some(user.clone()), &mut auth.user_id, &mut auth.username);
                    set(
                        user_domain,
                        &mut auth.user_domain_id,
                        &mut auth.user_domain_name,
                    );
                }
            }
            auth.application_credential_secret = Some(secret.clone());
            "v3applicationcredential"
        }
    };
    // How long one HTTP request may take is one of the SDK's untyped options (whole seconds, so a
    // fraction is rounded up); such options are only made by deserialising.
    let options = match p.api_timeout {
        Some(t) => {
            let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
            serde_json::from_value::<CloudConfig>(serde_json::json!({ "api_timeout": secs.max(1) }))
                .map_err(|e| CloudError::Config(format!("api_timeout: {e}")))?
                .options
        }
        None => Default::default(),
    };
    Ok(CloudConfig {
        auth: Some(auth),
        auth_type: Some(auth_type.into()),
        interface: Some(p.interface.as_str().into()),
        region_name: p.region_name.clone(),
        name: Some(p.name.clone()),
        cacert: p.cacert.as_ref().map(|c| c.display().to_string()),
        verify: Some(p.verify),
        auth_cache: Some(false),
        options,
        ..Default::default()
    })
}

/// Catalog types that stand for a service (Cinder is still registered as `volumev3` on many clouds).
pub(crate) fn catalog_aliases(s: ServiceKind) -> &'static [&'static str] {
    match s {
        ServiceKind::BlockStorage => &["block-storage", "volumev3", "volume"],
        ServiceKind::Identity => &["identity"],
        ServiceKind::Compute => &["compute"],
        ServiceKind::Network => &["network"],
        ServiceKind::Image => &["image"],
        ServiceKind::LoadBalancer => &["load-balancer"],
    }
}

/// Discovers every service in the catalog, concurrently. Identity was discovered by `connect`.
/// Connect-time discovery retries less than calls do: a service that is really broken there is
/// reported (when used) without a long wait.
const CONNECT_DISCOVERY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    base_delay: std::time::Duration::from_millis(500),
    max_delay: std::time::Duration::from_secs(5),
    max_retry_after: std::time::Duration::from_secs(5),
    max_throttled: std::time::Duration::from_secs(60),
    retry_busy_load_balancer: true,
};

/// Version discovery of `kinds`, concurrently, each retried under `policy` (a 503 from a busy
/// cloud must not leave a service undiscovered, its calls then going to the unversioned URL).
async fn discover(
    client: &AsyncOpenStack,
    redactor: &Redactor,
    policy: &RetryPolicy,
    kinds: &[ServiceKind],
) -> BTreeMap<ServiceKind, ServiceState> {
    let catalog: Vec<String> = client
        .get_token_catalog()
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.service_type)
        .collect();
    let one = |s: ServiceKind| {
        let present = catalog_aliases(s)
            .iter()
            .any(|a| catalog.iter().any(|c| c == a));
        async move {
            if !present {
                return (s, ServiceState::Missing);
            }
            let mut attempt = 0;
            loop {
                attempt += 1;
                let result = async {
                    if s != ServiceKind::Identity {
                        client
                            .discover_service_endpoint(&s.sdk())
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    // Region or interface mismatches show up here, not in discovery.
                    client
                        .get_service_endpoint(&s.sdk(), None)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
                .await;
                match result {
                    Ok(()) => return (s, ServiceState::Ready),
                    Err(e) if attempt >= policy.max_attempts => {
                        return (s, ServiceState::Broken(redactor.redact(&e)));
                    }
                    Err(e) => {
                        let delay = policy.delay(attempt, None, &mut rand::rng());
                        tracing::debug!(service = %s, attempt, error = %redactor.redact(&e), "version discovery failed; retrying");
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        }
    };
    futures::future::join_all(kinds.iter().map(|s| one(*s)))
        .await
        .into_iter()
        .collect()
}
