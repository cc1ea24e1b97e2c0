//! Keystone v3 subset: version discovery, password / application-credential / token auth with a catalog,
//! token validation and revocation, application credentials.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::app::{AuthCtx, SharedApp};
use crate::clock::SimTime;
use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::ids;
use crate::routes::{Routes, Sample};
use crate::service::Service;

const SVC: Service = Service::Identity;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Role {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    pub id: String,
    pub name: String,
    pub domain_id: String,
    pub password: String,
    pub default_project_id: String,
    /// The names of the roles assigned on the project (implied ones are added when a token is
    /// issued). States saved before roles were assigned get what every user had then.
    #[serde(default = "earlier_roles")]
    pub roles: Vec<String>,
}

fn earlier_roles() -> Vec<String> {
    ["member", "reader", "load-balancer_member", "creator"]
        .map(str::to_owned)
        .to_vec()
}

/// `keystone-manage bootstrap`'s implied roles: admin implies member, member implies reader.
const IMPLIED: [(&str, &str); 2] = [("admin", "member"), ("member", "reader")];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub domain_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppCred {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub user_id: String,
    pub project_id: String,
    pub secret: String,
    pub roles: Vec<Role>,
    pub unrestricted: bool,
    pub expires_at: Option<String>,
    /// What its tokens may call; empty: anything its roles allow. States saved before access
    /// rules were kept have none.
    #[serde(default)]
    pub access_rules: Vec<AccessRule>,
}

/// One access rule, as Keystone keeps it (the `access_rule` table: one row per user and
/// (service, path, method), shared by that user's credentials; `id` is its external id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRule {
    pub id: String,
    pub service: String,
    pub path: String,
    pub method: String,
}

/// A row of the `access_rule` table: a rule and its user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAccessRule {
    pub user_id: String,
    pub rule: AccessRule,
}

impl AccessRule {
    /// Whether `other` is the same row of one user's (the table's unique key, the user aside).
    fn same_key(&self, other: &AccessRule) -> bool {
        self.service == other.service && self.path == other.path && self.method == other.method
    }

    fn json(&self) -> Value {
        json!({"id": self.id, "service": self.service, "path": self.path, "method": self.method})
    }
}

/// keystonemiddleware `auth_token._path_matches`: `{name}` and a lone `*` are one path segment
/// (`[^/]+`), `**` anything (`.*`), every other character is put into the regular expression as
/// it is (a `.` matches any character; `{`, `}` and `*` outside those forms are dropped), and the
/// whole path must match.
pub fn path_matches(path: &str, pattern: &str) -> bool {
    let chars: Vec<char> = pattern.chars().collect();
    let mut re = String::from("^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' => match chars[i + 1..].iter().position(|c| *c == '}') {
                // `{[^}]*}`: a tag, unless another `{` comes first (then this one is dropped).
                Some(end) if !chars[i + 1..i + 1 + end].contains(&'{') => {
                    re.push_str("[^/]+");
                    i += end + 2;
                }
                _ => i += 1,
            },
            '*' if chars.get(i + 1) == Some(&'*') => {
                re.push_str(".*");
                i += 2;
            }
            '*' => {
                re.push_str("[^/]+");
                i += 1;
            }
            '}' => i += 1,
            c => {
                re.push(c);
                i += 1;
            }
        }
    }
    re.push('$');
    // A pattern Python's `re` cannot compile makes the middleware fail: nothing is allowed.
    regex::Regex::new(&re).is_ok_and(|r| r.is_match(path))
}

/// keystonemiddleware `BaseAuthProtocol.validate_allowed_request`, after the token validated, for
/// a service whose `[keystone_authtoken] service_type` is `service_type` (`None`: not set). `path`
/// is the whole path the service was asked for (WSGI's SCRIPT_NAME and PATH_INFO, decoded).
pub fn request_allowed(
    rules: &[AccessRule],
    service_type: Option<&str>,
    method: &str,
    path: &str,
) -> bool {
    // No rules: nothing to check. With rules, a service that does not know its own type refuses.
    if rules.is_empty() {
        return true;
    }
    let Some(mine) = service_type else {
        return false;
    };
    // A token may always be validated.
    if mine == "identity" && method == "GET" && path.ends_with("/v3/auth/tokens") {
        return true;
    }
    rules
        .iter()
        .any(|r| r.method == method && r.service == mine && path_matches(path, &r.path))
}

/// One request by a token of an application credential with access rules, as the service's
/// keystonemiddleware judged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCheck {
    /// The application credential's id.
    pub credential: String,
    /// The service's `[keystone_authtoken] service_type` (`None`: not set, everything refused).
    pub service_type: Option<String>,
    pub method: String,
    /// The whole path, decoded, as the rules are matched against it.
    pub path: String,
    /// Whether the rules allowed it (a 401 otherwise).
    pub allowed: bool,
    /// Every rule of the credential that allows it, in the credential's order (kept here: the
    /// credential may be deleted by the time a test reads this).
    pub matched: Vec<AccessRule>,
}

/// A request path as a WSGI service sees it: percent-escapes decoded.
pub fn wsgi_path(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Token {
    pub user_id: String,
    pub project_id: Option<String>,
    pub methods: Vec<String>,
    pub roles: Vec<Role>,
    pub app_cred: Option<(String, String)>,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Expiry on the simulator's clock (what validation checks).
    pub expires_sim: SimTime,
    pub audit_id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct KeystoneState {
    pub users: Vec<User>,
    pub projects: Vec<Project>,
    pub roles: Vec<Role>,
    pub app_creds: Vec<AppCred>,
    /// The `access_rule` table: rows outlive the credentials that made them (a credential's delete
    /// cascades only to its links), so a rule made again keeps its id. States saved before the
    /// table was kept have their rules only in their credentials.
    #[serde(default)]
    pub access_rules: Vec<StoredAccessRule>,
    pub tokens: HashMap<String, Token>,
    /// catalog endpoint ids, stable per service and interface
    pub endpoint_ids: HashMap<String, String>,
}

impl KeystoneState {
    pub fn seed(&mut self, cfg: &SimConfig) {
        let project = Project {
            id: ids::hex_id(),
            name: cfg.project.clone(),
            domain_id: "default".into(),
        };
        self.users.push(User {
            id: ids::hex_id(),
            name: cfg.username.clone(),
            domain_id: "default".into(),
            password: cfg.password.clone(),
            default_project_id: project.id.clone(),
            roles: cfg.user_roles.clone(),
        });
        self.projects.push(project);
        for name in [
            "admin",
            "member",
            "reader",
            "load-balancer_member",
            "creator",
        ] {
            self.roles.push(Role {
                id: ids::hex_id(),
                name: name.into(),
            });
        }
    }

    /// The id of the (first) project: the one every resource of the simulated cloud belongs to.
    pub fn project_id(&self) -> &str {
        self.projects.first().map(|p| p.id.as_str()).unwrap_or("")
    }

    pub fn validate(&self, token: &str, now: SimTime) -> Option<AuthCtx> {
        let t = self.tokens.get(token)?;
        if now.reached(t.expires_sim) {
            return None;
        }
        Some(AuthCtx {
            user_id: t.user_id.clone(),
            project_id: t.project_id.clone().unwrap_or_default(),
            roles: t.roles.iter().map(|r| r.name.clone()).collect(),
        })
    }

    /// [`Self::validate`], then the access rules of the token's application credential, checked as
    /// keystonemiddleware checks them in a service configured with `service_type`.
    pub fn authorize(
        &self,
        token: &str,
        now: SimTime,
        service_type: Option<&str>,
        method: &str,
        path: &str,
    ) -> Option<AuthCtx> {
        let ctx = self.validate(token, now)?;
        let rules = self.token_rules(token);
        request_allowed(rules, service_type, method, &wsgi_path(path)).then_some(ctx)
    }

    /// What keystonemiddleware's rule check makes of a request by `token`, for the per-credential
    /// record ([`crate::app::Observations::rule_checks`]): `None` when the token is invalid or its
    /// credential has no access rules (nothing is checked then).
    pub fn rule_check(
        &self,
        token: &str,
        now: SimTime,
        service_type: Option<&str>,
        method: &str,
        path: &str,
    ) -> Option<RuleCheck> {
        self.validate(token, now)?;
        let (cred, _) = self.tokens.get(token)?.app_cred.as_ref()?;
        let rules = self.token_rules(token);
        if rules.is_empty() {
            return None;
        }
        let path = wsgi_path(path);
        let allowed = request_allowed(rules, service_type, method, &path);
        // Every rule that allows it (keystonemiddleware stops at the first, in the credential's
        // order): a request two rules allow needs neither alone.
        let matched = match service_type {
            Some(mine) if allowed => rules
                .iter()
                .filter(|r| r.method == method && r.service == mine && path_matches(&path, &r.path))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        Some(RuleCheck {
            credential: cred.clone(),
            service_type: service_type.map(str::to_owned),
            method: method.to_owned(),
            path,
            allowed,
            matched,
        })
    }

    /// The access rules a token carries (those of the credential it was issued for).
    fn token_rules(&self, token: &str) -> &[AccessRule] {
        self.tokens
            .get(token)
            .and_then(|t| t.app_cred.as_ref())
            .and_then(|(id, _)| self.app_creds.iter().find(|a| &a.id == id))
            .map_or(&[], |a| a.access_rules.as_slice())
    }

    /// `names` with every role they imply, as the roles defined (unknown names are dropped).
    fn effective(&self, names: &[String]) -> Vec<Role> {
        let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut i = 0;
        while i < want.len() {
            for (prior, implied) in IMPLIED {
                if want[i] == prior && !want.contains(&implied) {
                    want.push(implied);
                }
            }
            i += 1;
        }
        self.roles
            .iter()
            .filter(|r| want.contains(&r.name.as_str()))
            .cloned()
            .collect()
    }

    /// Makes an application credential expire at `at` (`None`: never), as time passing would: the
    /// tokens it issued end then too. Returns whether it exists.
    pub fn set_app_cred_expiry(
        &mut self,
        id: &str,
        at: Option<DateTime<Utc>>,
        now: SimTime,
        scale: f64,
    ) -> bool {
        let Some(cred) = self.app_creds.iter_mut().find(|a| a.id == id) else {
            return false;
        };
        cred.expires_at = at.map(keystone_time);
        if let Some(at) = at {
            for t in self.tokens.values_mut() {
                if t.app_cred.as_ref().is_some_and(|(cid, _)| cid == id) && t.expires_at > at {
                    cap_token(t, at, now, scale);
                }
            }
        }
        true
    }

    /// Makes every issued token invalid (what a token expiry or a revocation event does to clients).
    pub fn expire_all_tokens(&mut self) {
        self.tokens.clear();
    }

    fn domain_name(id: &str) -> &'static str {
        if id == "default" { "Default" } else { "Other" }
    }
}

/// How Keystone shows an application credential's expiry: `2018-02-27T18:30:59.000000` (UTC, no
/// zone; the API reference's sample).
fn keystone_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// An application credential's `expires_at`, read as Keystone does
/// (`keystone.common.utils.parse_expiration_date`): a `Z` is appended unless there is one, then
/// the ISO 8601 time is parsed, so a numeric offset (`+00:00`) is malformed.
fn parse_expiration(v: &str) -> Option<DateTime<Utc>> {
    let z = if v.ends_with('Z') {
        v.to_owned()
    } else {
        format!("{v}Z")
    };
    let naive = z.strip_suffix('Z')?;
    chrono::NaiveDateTime::parse_from_str(naive, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(naive, "%Y-%m-%dT%H:%M"))
        .ok()
        .map(|n| n.and_utc())
}

/// A token of an application credential ends no later than the credential
/// (`keystone.token.provider`: the token's expiry is capped at the credential's).
fn cap_token(t: &mut Token, at: DateTime<Utc>, now: SimTime, scale: f64) {
    let left = (at - Utc::now()).num_milliseconds().max(0) as f64 / 1000.0;
    t.expires_at = at;
    t.expires_sim = now.after(left / scale);
}

pub fn routes() -> Routes {
    use Sample::*;
    Routes::new(SVC)
        .get(
            "/identity",
            versions,
            File("identity/admin/identity-versions-response.json"),
        )
        .get(
            "/identity/",
            versions,
            File("identity/admin/identity-versions-response.json"),
        )
        .get(
            "/identity/v3",
            version,
            File("identity/admin/identity-version-response.json"),
        )
        .get(
            "/identity/v3/",
            version,
            File("identity/admin/identity-version-response.json"),
        )
        .post(
            "/identity/v3/auth/tokens",
            issue_token,
            File("identity/admin/auth-password-project-scoped-response.json"),
        )
        .get(
            "/identity/v3/auth/tokens",
            validate_token,
            File("identity/admin/auth-token-scoped-response.json"),
        )
        .head(
            "/identity/v3/auth/tokens",
            check_token,
            NoBody("HEAD has no body"),
        )
        .delete("/identity/v3/auth/tokens", revoke_token, NoBody("204"))
        .get(
            "/identity/v3/auth/catalog",
            auth_catalog,
            File("identity/admin/get-service-catalog-response.json"),
        )
        .get(
            "/identity/v3/auth/projects",
            auth_projects,
            File("identity/admin/get-available-project-scopes-response.json"),
        )
        .get(
            "/identity/v3/projects",
            list_projects,
            File("identity/admin/projects-list-response.json"),
        )
        .get(
            "/identity/v3/projects/{id}",
            get_project,
            File("identity/admin/project-show-response.json"),
        )
        .get(
            "/identity/v3/users/{id}",
            get_user,
            File("identity/admin/user-show-response.json"),
        )
        .post(
            "/identity/v3/users/{id}/application_credentials",
            create_app_cred,
            File("identity/admin/application-credential-create-response.json"),
        )
        .get(
            "/identity/v3/users/{id}/application_credentials",
            list_app_creds,
            File("identity/admin/application-credential-list-response.json"),
        )
        .get(
            "/identity/v3/users/{id}/application_credentials/{cred}",
            get_app_cred,
            File("identity/admin/application-credential-get-response.json"),
        )
        .delete(
            "/identity/v3/users/{id}/application_credentials/{cred}",
            delete_app_cred,
            NoBody("204"),
        )
}

fn version_doc(app: &SharedApp) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{}/identity/v3/", app.base_url)}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

async fn versions(State(app): State<SharedApp>) -> Response {
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({"versions": {"values": [version_doc(&app)]}})),
    )
        .into_response()
}

async fn version(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"version": version_doc(&app)}))
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn unauthorized(msg: &str) -> SimError {
    SimError::new(SVC, StatusCode::UNAUTHORIZED, "Unauthorized", msg)
}

/// Which user a `{"user": {...}}` object names: by id, or by name within a domain given by id or name.
fn find_user<'a>(ks: &'a KeystoneState, u: &Value) -> Option<&'a User> {
    if let Some(id) = s(u, "/id") {
        return ks.users.iter().find(|x| x.id == id);
    }
    let name = s(u, "/name")?;
    let dom_id = s(u, "/domain/id").map(str::to_owned).or_else(|| {
        s(u, "/domain/name").map(|n| {
            if n.eq_ignore_ascii_case("default") {
                "default".to_owned()
            } else {
                n.to_owned()
            }
        })
    })?;
    ks.users
        .iter()
        .find(|x| x.name == name && x.domain_id == dom_id)
}

fn find_project<'a>(ks: &'a KeystoneState, p: &Value) -> Option<&'a Project> {
    if let Some(id) = s(p, "/id") {
        return ks.projects.iter().find(|x| x.id == id);
    }
    let name = s(p, "/name")?;
    let dom_id = s(p, "/domain/id").map(str::to_owned).or_else(|| {
        s(p, "/domain/name").map(|n| {
            if n.eq_ignore_ascii_case("default") {
                "default".to_owned()
            } else {
                n.to_owned()
            }
        })
    })?;
    ks.projects
        .iter()
        .find(|x| x.name == name && x.domain_id == dom_id)
}

fn catalog(app: &SharedApp, ks: &mut KeystoneState, project_id: &str) -> Value {
    let region = &app.cfg.region;
    let mut entries = Vec::new();
    let mut services: Vec<(Service, &str, &str)> = Service::CLOUD
        .iter()
        .map(|s| (*s, s.catalog_type(), s.catalog_name()))
        .collect();
    // Older clients look for the volumev3 alias.
    services.push((Service::BlockStorage, "volumev3", "cinderv3"));
    for (svc, typ, name) in services {
        let url = app.endpoint_url(svc, project_id);
        let endpoints: Vec<Value> = ["public", "internal", "admin"]
            .iter()
            .map(|iface| {
                let key = format!("{typ}/{iface}");
                let id = ks.endpoint_ids.entry(key).or_insert_with(ids::hex_id).clone();
                json!({"id": id, "interface": iface, "region": region, "region_id": region, "url": url})
            })
            .collect();
        let sid = ks
            .endpoint_ids
            .entry(format!("service/{typ}"))
            .or_insert_with(ids::hex_id)
            .clone();
        entries.push(json!({"endpoints": endpoints, "id": sid, "type": typ, "name": name}));
    }
    Value::Array(entries)
}

fn token_body(app: &SharedApp, ks: &mut KeystoneState, t: &Token, with_catalog: bool) -> Value {
    let user = ks.users.iter().find(|u| u.id == t.user_id).cloned();
    let mut body = json!({
        "methods": t.methods,
        "user": user.as_ref().map(|u| json!({
            "id": u.id, "name": u.name, "password_expires_at": null,
            "domain": {"id": u.domain_id, "name": KeystoneState::domain_name(&u.domain_id)},
        })),
        "audit_ids": [t.audit_id],
        "issued_at": ids::iso_micro_z(t.issued_at),
        "expires_at": ids::iso_micro_z(t.expires_at),
    });
    if let Some(pid) = &t.project_id
        && let Some(p) = ks.projects.iter().find(|p| &p.id == pid).cloned()
    {
        body["project"] = json!({"id": p.id, "name": p.name, "domain": {"id": p.domain_id, "name": KeystoneState::domain_name(&p.domain_id)}});
        body["is_domain"] = json!(false);
        body["roles"] = json!(
            t.roles
                .iter()
                .map(|r| json!({"id": r.id, "name": r.name}))
                .collect::<Vec<_>>()
        );
        if with_catalog {
            body["catalog"] = catalog(app, ks, &p.id);
        }
    }
    if let Some((id, name)) = &t.app_cred {
        body["application_credential"] = json!({"id": id, "name": name, "restricted": true});
        // keystone/common/render_token.py: the rules, when the credential has any.
        let rules: Vec<Value> = ks
            .app_creds
            .iter()
            .find(|a| &a.id == id)
            .map(|a| a.access_rules.iter().map(AccessRule::json).collect())
            .unwrap_or_default();
        if !rules.is_empty() {
            body["application_credential"]["access_rules"] = Value::Array(rules);
        }
    }
    json!({"token": body})
}

async fn issue_token(State(app): State<SharedApp>, Json(req): Json<Value>) -> SimResult<Response> {
    let methods: Vec<String> = req
        .pointer("/auth/identity/methods")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if methods.is_empty() {
        return Err(SimError::bad_request(
            SVC,
            "Expecting to find identity in auth.",
        ));
    }
    let now = app.now();
    let mut cloud = app.cloud();
    let ks = &mut cloud.keystone;
    let mut cred_expiry = None;
    let (user_id, mut project_id, roles, app_cred) = match methods[0].as_str() {
        "password" => {
            let u = req
                .pointer("/auth/identity/password/user")
                .ok_or_else(|| SimError::bad_request(SVC, "password.user is required"))?;
            let user = find_user(ks, u).ok_or_else(|| {
                unauthorized("The request you have made requires authentication.")
            })?;
            if s(u, "/password") != Some(user.password.as_str()) {
                return Err(unauthorized(
                    "The request you have made requires authentication.",
                ));
            }
            let roles = ks.effective(&user.roles);
            (user.id.clone(), None, roles, None)
        }
        "application_credential" => {
            let c = req
                .pointer("/auth/identity/application_credential")
                .ok_or_else(|| SimError::bad_request(SVC, "application_credential is required"))?;
            let secret = s(c, "/secret").unwrap_or("");
            let cred = if let Some(id) = s(c, "/id") {
                ks.app_creds.iter().find(|a| a.id == id)
            } else {
                let name = s(c, "/name").unwrap_or("");
                let user = c
                    .get("user")
                    .and_then(|u| find_user(ks, u))
                    .map(|u| u.id.clone());
                ks.app_creds
                    .iter()
                    .find(|a| a.name == name && Some(&a.user_id) == user.as_ref())
            };
            // Keystone answers a wrong secret and an expired credential alike
            // (application_credential/backends/sql.py `authenticate`).
            let expired = |a: &AppCred| {
                a.expires_at
                    .as_deref()
                    .and_then(parse_expiration)
                    .is_some_and(|at| at <= Utc::now())
            };
            let cred = cred
                .filter(|a| a.secret == secret && !expired(a))
                .ok_or_else(|| {
                    unauthorized("The request you have made requires authentication.")
                })?;
            cred_expiry = cred.expires_at.as_deref().and_then(parse_expiration);
            (
                cred.user_id.clone(),
                Some(cred.project_id.clone()),
                cred.roles.clone(),
                Some((cred.id.clone(), cred.name.clone())),
            )
        }
        "token" => {
            let id = s(&req, "/auth/identity/token/id").unwrap_or("");
            let t = ks
                .tokens
                .get(id)
                .filter(|t| !now.reached(t.expires_sim))
                .ok_or_else(|| unauthorized("Could not find token."))?;
            (
                t.user_id.clone(),
                t.project_id.clone(),
                t.roles.clone(),
                t.app_cred.clone(),
            )
        }
        other => {
            return Err(unauthorized(&format!(
                "Attempted to authenticate with an unsupported method: {other}"
            )));
        }
    };
    if app_cred.is_none() {
        if let Some(scope) = req.pointer("/auth/scope/project") {
            let p = find_project(ks, scope)
                .ok_or_else(|| unauthorized("No project found for the requested scope."))?;
            project_id = Some(p.id.clone());
        } else if req.pointer("/auth/scope").is_none() && project_id.is_none() {
            project_id = ks
                .users
                .iter()
                .find(|u| u.id == user_id)
                .map(|u| u.default_project_id.clone());
        }
    }
    let issued = Utc::now();
    let lifetime = app.cfg.token_lifetime_secs;
    let real = chrono::Duration::from_std(app.clock.real(lifetime))
        .unwrap_or_else(|_| chrono::Duration::hours(1));
    let mut raw = [0u8; 64];
    rand::Rng::fill(&mut rand::rng(), &mut raw[..]);
    let id = format!(
        "gAAAAA{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let mut token = Token {
        user_id,
        project_id,
        methods,
        roles,
        app_cred,
        issued_at: issued,
        expires_at: issued + real,
        expires_sim: now.after(lifetime),
        audit_id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw[..16]),
    };
    if let Some(at) = cred_expiry
        && at < token.expires_at
    {
        cap_token(&mut token, at, now, app.clock.scale());
    }
    let body = token_body(&app, ks, &token, true);
    ks.tokens.insert(id.clone(), token);
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    Ok(resp)
}

/// Keystone's own keystonemiddleware (`AuthContextMiddleware`, service type `identity`), in front
/// of every Keystone route: a request carrying a valid token whose credential's access rules do
/// not allow it is refused (401 "Not authorized."), token issuance included. A missing or invalid
/// token is left to the handlers.
pub async fn access_rules_gate(
    State(app): State<SharedApp>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let token = req
        .headers()
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(t) = token {
        let now = app.now();
        let cloud = app.cloud();
        let ks = &cloud.keystone;
        let valid = ks.validate(&t, now).is_some();
        let allowed = ks
            .authorize(
                &t,
                now,
                Some("identity"),
                req.method().as_str(),
                req.uri().path(),
            )
            .is_some();
        let check = ks.rule_check(
            &t,
            now,
            Some("identity"),
            req.method().as_str(),
            req.uri().path(),
        );
        drop(cloud);
        if let Some(c) = check {
            app.observations().record_rule_check(c);
        }
        if valid && !allowed {
            return unauthorized("Not authorized.").into_response();
        }
    }
    next.run(req).await
}

/// The caller (X-Auth-Token) must be valid for every other Keystone call.
fn caller(app: &SharedApp, headers: &HeaderMap) -> SimResult<AuthCtx> {
    let t = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    app.cloud()
        .keystone
        .validate(t, app.now())
        .ok_or_else(|| SimError::unauthorized(SVC))
}

fn subject(headers: &HeaderMap) -> &str {
    headers
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn validate_token(State(app): State<SharedApp>, headers: HeaderMap) -> SimResult<Response> {
    caller(&app, &headers)?;
    let now = app.now();
    let sub = subject(&headers).to_owned();
    let mut cloud = app.cloud();
    let ks = &mut cloud.keystone;
    let t = ks
        .tokens
        .get(&sub)
        .filter(|t| !now.reached(t.expires_sim))
        .cloned()
        .ok_or_else(|| SimError::not_found(SVC, "Could not find token."))?;
    let body = token_body(&app, ks, &t, true);
    let mut resp = Json(body).into_response();
    if let Ok(v) = HeaderValue::from_str(&sub) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    Ok(resp)
}

async fn check_token(State(app): State<SharedApp>, headers: HeaderMap) -> SimResult<StatusCode> {
    caller(&app, &headers)?;
    let ok = app
        .cloud()
        .keystone
        .validate(subject(&headers), app.now())
        .is_some();
    if ok {
        Ok(StatusCode::OK)
    } else {
        Err(SimError::not_found(SVC, "Could not find token."))
    }
}

async fn revoke_token(State(app): State<SharedApp>, headers: HeaderMap) -> SimResult<StatusCode> {
    caller(&app, &headers)?;
    let removed = app
        .cloud()
        .keystone
        .tokens
        .remove(subject(&headers))
        .is_some();
    if removed {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(SVC, "Could not find token."))
    }
}

async fn auth_catalog(State(app): State<SharedApp>, headers: HeaderMap) -> SimResult<Json<Value>> {
    let ctx = caller(&app, &headers)?;
    let mut cloud = app.cloud();
    let cat = catalog(&app, &mut cloud.keystone, &ctx.project_id);
    Ok(Json(
        json!({"catalog": cat, "links": {"self": format!("{}/identity/v3/auth/catalog", app.base_url), "previous": null, "next": null}}),
    ))
}

fn project_json(app: &SharedApp, p: &Project) -> Value {
    json!({
        "id": p.id, "name": p.name, "domain_id": p.domain_id, "description": "", "enabled": true,
        "is_domain": false, "parent_id": p.domain_id, "tags": [], "options": {},
        "links": {"self": format!("{}/identity/v3/projects/{}", app.base_url, p.id)},
    })
}

async fn auth_projects(State(app): State<SharedApp>, headers: HeaderMap) -> SimResult<Json<Value>> {
    caller(&app, &headers)?;
    let projects: Vec<Value> = app
        .cloud()
        .keystone
        .projects
        .iter()
        .map(|p| project_json(&app, p))
        .collect();
    Ok(Json(
        json!({"projects": projects, "links": {"self": format!("{}/identity/v3/auth/projects", app.base_url), "previous": null, "next": null}}),
    ))
}

async fn list_projects(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    q: crate::query::QueryParams,
) -> SimResult<Json<Value>> {
    caller(&app, &headers)?;
    let projects: Vec<Value> = app
        .cloud()
        .keystone
        .projects
        .iter()
        .filter(|p| q.get("name").is_none_or(|n| n == p.name))
        .map(|p| project_json(&app, p))
        .collect();
    Ok(Json(
        json!({"projects": projects, "links": {"self": format!("{}/identity/v3/projects", app.base_url), "previous": null, "next": null}}),
    ))
}

async fn get_project(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    caller(&app, &headers)?;
    let cloud = app.cloud();
    let p = cloud
        .keystone
        .projects
        .iter()
        .find(|p| p.id == id || p.name == id)
        .ok_or_else(|| SimError::not_found(SVC, format!("Could not find project: {id}.")))?;
    Ok(Json(json!({"project": project_json(&app, p)})))
}

async fn get_user(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let ctx = caller(&app, &headers)?;
    if ctx.user_id != id && !ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "You are not authorized to perform the requested action: identity:get_user.",
        ));
    }
    let cloud = app.cloud();
    let u = cloud
        .keystone
        .users
        .iter()
        .find(|u| u.id == id)
        .ok_or_else(|| SimError::not_found(SVC, format!("Could not find user: {id}.")))?;
    Ok(Json(json!({"user": {
        "id": u.id, "name": u.name, "domain_id": u.domain_id, "enabled": true, "default_project_id": u.default_project_id,
        "password_expires_at": null, "options": {}, "federated": [],
        "links": {"self": format!("{}/identity/v3/users/{}", app.base_url, u.id)},
    }})))
}

fn app_cred_json(app: &SharedApp, a: &AppCred, with_secret: bool) -> Value {
    let mut v = json!({
        "id": a.id, "name": a.name, "description": a.description, "project_id": a.project_id,
        "roles": a.roles.iter().map(|r| json!({"id": r.id, "name": r.name, "domain_id": null})).collect::<Vec<_>>(),
        "unrestricted": a.unrestricted, "expires_at": a.expires_at,
        "access_rules": a.access_rules.iter().map(AccessRule::json).collect::<Vec<_>>(),
        "links": {"self": format!("{}/identity/v3/users/{}/application_credentials/{}", app.base_url, a.user_id, a.id)},
    });
    if with_secret {
        v["secret"] = json!(a.secret);
    }
    v
}

fn own_user(ctx: &AuthCtx, user_id: &str) -> SimResult<()> {
    if ctx.user_id == user_id {
        Ok(())
    } else {
        Err(SimError::forbidden(
            SVC,
            "You are not authorized to perform the requested action.",
        ))
    }
}

async fn create_app_cred(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path(user_id): Path<String>,
    Json(req): Json<Value>,
) -> SimResult<Response> {
    let ctx = caller(&app, &headers)?;
    own_user(&ctx, &user_id)?;
    let c = req
        .get("application_credential")
        .ok_or_else(|| SimError::bad_request(SVC, "application_credential is required"))?;
    let name = s(c, "/name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| SimError::bad_request(SVC, "'name' is a required property"))?
        .to_owned();
    let (cred, inserts, body) = stage_create(&app, &ctx, &headers, user_id, name, c)?;
    // The transaction holds its new rows until it commits; the commit then meets the table's unique
    // keys: (user, name) and (user, service, path, method). A create of the same user that
    // committed one of them meanwhile wins, and this one fails as Keystone's does: the 409 of
    // `handle_conflicts`, which names this credential whichever key it was.
    let hold = app.latency().app_credential_commit_secs;
    if !inserts.is_empty() && hold > 0.0 {
        tokio::time::sleep(app.clock.real(hold)).await;
    }
    let mut cloud = app.cloud();
    let ks = &mut cloud.keystone;
    if name_taken(ks, &cred.user_id, &cred.name)
        || inserts.iter().any(|r| rule_stored(ks, &cred.user_id, r))
    {
        return Err(duplicate(&cred.name));
    }
    ks.access_rules
        .extend(inserts.into_iter().map(|rule| StoredAccessRule {
            user_id: cred.user_id.clone(),
            rule,
        }));
    ks.app_creds.push(cred);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// A create as far as its transaction's commit: checked, resolved, answered; what it inserts.
fn stage_create(
    app: &SharedApp,
    ctx: &AuthCtx,
    headers: &HeaderMap,
    user_id: String,
    name: String,
    c: &Value,
) -> SimResult<(AppCred, Vec<AccessRule>, Value)> {
    let mut cloud = app.cloud();
    let ks = &mut cloud.keystone;
    // keystone/api/users.py `_check_unrestricted_application_credential`: a restricted credential
    // cannot make another (nor renew itself).
    let restricted = ks
        .tokens
        .get(
            headers
                .get("x-auth-token")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
        .and_then(|t| t.app_cred.as_ref())
        .and_then(|(id, _)| ks.app_creds.iter().find(|a| &a.id == id))
        .is_some_and(|a| !a.unrestricted);
    if restricted {
        return Err(SimError::forbidden(
            SVC,
            "You are not authorized to perform the requested action: Using method \
             'application_credential' is not allowed for managing additional application \
             credentials.",
        ));
    }
    if name_taken(ks, &user_id, &name) {
        return Err(duplicate(&name));
    }
    let secret = match s(c, "/secret") {
        Some(sec) => sec.to_owned(),
        None => {
            let mut raw = [0u8; 48];
            rand::Rng::fill(&mut rand::rng(), &mut raw[..]);
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        }
    };
    // Roles default to the caller's token's roles. Asked-for roles come with the roles they imply,
    // and every one must be in the token: keystone/api/users.py `_get_roles` (400, not 403), after
    // looking each name up (404 for a role that does not exist).
    let token_roles: Vec<Role> = ks
        .roles
        .iter()
        .filter(|r| ctx.roles.contains(&r.name))
        .cloned()
        .collect();
    let roles = match c
        .get("roles")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        Some(req_roles) => {
            let mut names = Vec::new();
            for r in req_roles {
                let found = ks.roles.iter().find(|d| {
                    Some(d.id.as_str()) == s(r, "/id")
                        || (s(r, "/id").is_none() && Some(d.name.as_str()) == s(r, "/name"))
                });
                let role = found.ok_or_else(|| {
                    let asked = s(r, "/id").or_else(|| s(r, "/name")).unwrap_or("");
                    SimError::not_found(SVC, format!("Could not find role: {asked}."))
                })?;
                names.push(role.name.clone());
            }
            let roles = ks.effective(&names);
            if roles
                .iter()
                .any(|r| !token_roles.iter().any(|t| t.id == r.id))
            {
                return Err(SimError::bad_request(
                    SVC,
                    "Invalid application credential: Cannot create an application credential \
                     with unassigned role",
                ));
            }
            roles
        }
        None => token_roles,
    };
    // keystone.common.utils.parse_expiration_date.
    let expires_at = match c.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let at = v.as_str().and_then(parse_expiration).ok_or_else(|| {
                SimError::bad_request(
                    SVC,
                    "Timestamp not in expected format. The server could not comply with the \
                     request since it is either malformed or otherwise incorrect. The client is \
                     assumed to be in error.",
                )
            })?;
            if at <= Utc::now() {
                return Err(SimError::bad_request(
                    SVC,
                    "The 'expires_at' must not be before now. The server could not comply with \
                     the request since it is either malformed or otherwise incorrect. The client \
                     is assumed to be in error.",
                ));
            }
            Some(keystone_time(at))
        }
    };
    let access_rules = read_access_rules(ks, &user_id, c.get("access_rules"))?;
    // The rows this create's transaction inserts: rules no row of the user's holds yet.
    let inserts: Vec<AccessRule> = access_rules
        .iter()
        .filter(|r| !rule_stored(ks, &user_id, r))
        .cloned()
        .collect();
    let cred = AppCred {
        id: ids::hex_id(),
        name,
        description: s(c, "/description").map(str::to_owned),
        user_id,
        project_id: ctx.project_id.clone(),
        secret,
        roles,
        unrestricted: c
            .get("unrestricted")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        expires_at,
        access_rules,
    };
    let mut body = json!({"application_credential": app_cred_json(app, &cred, true)});
    // The create answers with the stored row as given (checked against Keystone 30): the user and
    // `system` too, and `unrestricted` as sent (null when the request left it out).
    let created = &mut body["application_credential"];
    created["user_id"] = json!(cred.user_id);
    created["system"] = Value::Null;
    created["unrestricted"] = c.get("unrestricted").cloned().unwrap_or(Value::Null);
    Ok((cred, inserts, body))
}

fn name_taken(ks: &KeystoneState, user_id: &str, name: &str) -> bool {
    ks.app_creds
        .iter()
        .any(|a| a.user_id == user_id && a.name == name)
}

/// Whether the user has a row of `rule`'s key (in the table, or in a credential of a state saved
/// before the table was kept).
fn rule_stored(ks: &KeystoneState, user_id: &str, rule: &AccessRule) -> bool {
    ks.access_rules
        .iter()
        .any(|s| s.user_id == user_id && s.rule.same_key(rule))
        || ks
            .app_creds
            .iter()
            .filter(|a| a.user_id == user_id)
            .any(|a| a.access_rules.iter().any(|r| r.same_key(rule)))
}

/// keystone/common/sql/core.py `handle_conflicts` for `application_credential`.
fn duplicate(name: &str) -> SimError {
    SimError::conflict(
        SVC,
        "Conflict",
        format!(
            "Conflict occurred attempting to store application_credential - Duplicate entry found with name {name}."
        ),
    )
}

async fn list_app_creds(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path(user_id): Path<String>,
    q: crate::query::QueryParams,
) -> SimResult<Json<Value>> {
    let ctx = caller(&app, &headers)?;
    own_user(&ctx, &user_id)?;
    let creds: Vec<Value> = app
        .cloud()
        .keystone
        .app_creds
        .iter()
        .filter(|a| a.user_id == user_id && q.get("name").is_none_or(|n| n == a.name))
        .map(|a| app_cred_json(&app, a, false))
        .collect();
    Ok(Json(json!({
        "application_credentials": creds,
        "links": {"self": format!("{}/identity/v3/users/{user_id}/application_credentials", app.base_url), "previous": null, "next": null},
    })))
}

async fn get_app_cred(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path((user_id, id)): Path<(String, String)>,
) -> SimResult<Json<Value>> {
    let ctx = caller(&app, &headers)?;
    own_user(&ctx, &user_id)?;
    let cloud = app.cloud();
    let a = cloud
        .keystone
        .app_creds
        .iter()
        .find(|a| a.user_id == user_id && a.id == id)
        .ok_or_else(|| {
            SimError::not_found(SVC, format!("Could not find application credential: {id}."))
        })?;
    Ok(Json(
        json!({"application_credential": app_cred_json(&app, a, false)}),
    ))
}

async fn delete_app_cred(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    Path((user_id, id)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let ctx = caller(&app, &headers)?;
    own_user(&ctx, &user_id)?;
    let mut cloud = app.cloud();
    let ks = &mut cloud.keystone;
    let before = ks.app_creds.len();
    ks.app_creds
        .retain(|a| !(a.user_id == user_id && a.id == id));
    if ks.app_creds.len() == before {
        return Err(SimError::not_found(
            SVC,
            format!("Could not find application credential: {id}."),
        ));
    }
    // Tokens issued from a deleted credential stop working at once, as in Keystone.
    ks.tokens
        .retain(|_, t| t.app_cred.as_ref().is_none_or(|(cid, _)| cid != &id));
    Ok(StatusCode::NO_CONTENT)
}

/// The `access_rules` of a create, checked as Keystone's schema checks them
/// (keystone/application_credential/schema.py), then resolved as its SQL backend does: a rule
/// whose `id` names an existing rule is that rule; one equal to a rule of the same user is that
/// one; otherwise a new rule (its `id` as given, or a new one).
fn read_access_rules(
    ks: &KeystoneState,
    user_id: &str,
    v: Option<&Value>,
) -> SimResult<Vec<AccessRule>> {
    let invalid = |field: String, detail: String| {
        SimError::bad_request(SVC, format!("Invalid input for field '{field}': {detail}"))
    };
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(invalid(
                "access_rules".into(),
                format!("{other} is not of type 'array'"),
            ));
        }
    };
    // parameter_types.id_string.
    let id_string = |s: &str| {
        !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    let mut out: Vec<AccessRule> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = |k: &str| format!("access_rules/{i}/{k}");
        let Value::Object(rule) = item else {
            return Err(invalid(
                format!("access_rules/{i}"),
                format!("{item} is not of type 'object'"),
            ));
        };
        let text = |k: &str| -> SimResult<Option<&str>> {
            match rule.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(invalid(
                    field(k),
                    format!("{other} is not of type 'string'"),
                )),
            }
        };
        let (id, service, path, method) = (
            text("id")?,
            text("service")?,
            text("path")?,
            text("method")?,
        );
        if let Some(p) = path {
            if p.chars().count() > 225 {
                return Err(invalid(field("path"), format!("'{p}' is too long")));
            }
            if !p.starts_with('/') {
                return Err(invalid(
                    field("path"),
                    format!("'{p}' does not match '^/\\.*'"),
                ));
            }
        }
        if let Some(s) = service.filter(|s| !id_string(s)) {
            return Err(invalid(
                field("service"),
                format!("'{s}' does not match '^[a-zA-Z0-9-]+$'"),
            ));
        }
        if let Some(m) =
            method.filter(|m| !["DELETE", "GET", "HEAD", "PATCH", "POST", "PUT"].contains(m))
        {
            return Err(invalid(
                field("method"),
                format!("'{m}' is not one of ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT']"),
            ));
        }
        if let Some(x) = id.filter(|x| !id_string(x)) {
            return Err(invalid(
                field("id"),
                format!("'{x}' does not match '^[a-zA-Z0-9-]+$'"),
            ));
        }
        let existing = ks
            .access_rules
            .iter()
            .map(|s| (s.user_id.as_str(), &s.rule))
            .chain(
                ks.app_creds
                    .iter()
                    .flat_map(|a| a.access_rules.iter().map(move |r| (a.user_id.as_str(), r))),
            );
        // By external id, whoever's it is (the backend does not filter that lookup by user).
        let mut found = id.and_then(|x| {
            existing
                .clone()
                .find(|(_, r)| r.id == x)
                .map(|(_, r)| r.clone())
        });
        let (Some(service), Some(path), Some(method)) = (service, path, method) else {
            // The backend reads all three (a KeyError, so a 500) unless the id found a rule.
            match found {
                Some(r) => {
                    out.push(r);
                    continue;
                }
                None => {
                    return Err(SimError::new(
                        SVC,
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "Internal Server Error",
                        "An unexpected error prevented the server from fulfilling your request.",
                    ));
                }
            }
        };
        if found.is_none() {
            found = existing
                .clone()
                .find(|(u, r)| {
                    *u == user_id && r.service == service && r.path == path && r.method == method
                })
                .map(|(_, r)| r.clone())
                .or_else(|| {
                    out.iter()
                        .find(|r| r.service == service && r.path == path && r.method == method)
                        .cloned()
                });
        }
        out.push(found.unwrap_or_else(|| AccessRule {
            id: id.map_or_else(ids::hex_id, str::to_owned),
            service: service.to_owned(),
            path: path.to_owned(),
            method: method.to_owned(),
        }));
    }
    Ok(out)
}
