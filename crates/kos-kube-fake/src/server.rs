//! The HTTP surface: URL parsing into (type, namespace, name, subresource), the verbs, discovery
//! and OpenAPI, the representation asked for (`Accept`: the object, `PartialObjectMetadata`, a
//! `Table`, aggregated discovery), request bodies in JSON or protobuf, `Warning` headers, the
//! request log and fault injection. One axum fallback handler serves every path, because the
//! Kubernetes URL space (`/api/v1/namespaces/{ns}/{plural}` next to `/api/v1/namespaces/{name}`)
//! does not fit a static route table.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::Config;
use crate::authz::{RequestInfo, User};
use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::log::{PatchType, Request, Verb};
use crate::openapi;
use crate::schema::FieldValidation;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Scope, Store, WriteCtx};
use crate::table::{self, IncludeObject};
use crate::watch::{self as watching, WatchParams};

/// State shared by the server, the watches and the test handle.
pub(crate) struct Shared {
    store: Mutex<Store>,
    /// The latest resourceVersion; watches wake on it.
    pub changed: watch::Sender<u64>,
    /// Set when the fake stops; open watches end.
    pub stopping: watch::Sender<bool>,
    pub config: Config,
    /// Where pods' ports lead (`pods/portforward`); none: every port is refused.
    port_forward: Mutex<Option<Arc<dyn crate::portforward::PortForward>>>,
    /// The ServiceAccount tokens issued.
    tokens: Mutex<crate::authn::Tokens>,
}

/// The encryption configuration of the API server (TLS front) a request came through.
#[derive(Debug, Clone)]
pub(crate) struct Encrypting(pub Arc<crate::encryption::EncryptionConfig>);

/// Who a request is, once authenticated and authorised (by the TLS front or [`admit`]).
#[derive(Debug, Clone)]
pub(crate) struct Admitted(pub User);

impl Shared {
    pub fn new(store: Store, config: Config) -> Shared {
        let rv = store.resource_version();
        Shared {
            store: Mutex::new(store),
            changed: watch::Sender::new(rv),
            stopping: watch::Sender::new(false),
            config,
            port_forward: Mutex::new(None),
            tokens: Mutex::new(Default::default()),
        }
    }

    pub fn tokens(&self) -> MutexGuard<'_, crate::authn::Tokens> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The user of a bearer token: a bootstrap token or a ServiceAccount token of this fake.
    pub fn authenticate_token(&self, token: &str) -> Option<User> {
        let store = self.store();
        crate::authn::bootstrap_token(&store, token)
            .or_else(|| self.tokens().authenticate(&store, token))
    }

    /// The authorizer chain's decision on a request; a denial is logged as a 403 and returned.
    pub fn authorize(&self, user: &User, method: &Method, uri: &Uri) -> ApiResult<()> {
        let info = RequestInfo::parse(method.as_str(), uri.path(), uri.query().unwrap_or_default());
        let mut store = self.store();
        match crate::authz::authorize(&store, user, &info) {
            Ok(why) => {
                tracing::trace!(user = %user.name, path = %uri.path(), "{why}");
                Ok(())
            }
            Err(e) => {
                tracing::debug!(user = %user.name, groups = ?user.groups, "{}", e.message);
                let seq = store.next_seq;
                store.next_seq += 1;
                let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                store.requests.push(Request {
                    seq,
                    method: method.to_string(),
                    path: uri.path().to_owned(),
                    query: uri.query().unwrap_or_default().to_owned(),
                    verb: Verb::of(&info.verb),
                    resource: opt(&info.resource),
                    group: info.resource_request.then(|| info.api_group.clone()),
                    namespace: opt(&info.namespace),
                    name: opt(&info.name),
                    subresource: opt(&info.subresource),
                    patch: None,
                    field_manager: None,
                    user: Some(user.name.clone()),
                    status: 403,
                });
                Err(e)
            }
        }
    }

    /// The store; a panic elsewhere while it was held leaves it usable (tests then see the panic).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn port_forward(&self) -> Option<Arc<dyn crate::portforward::PortForward>> {
        self.port_forward
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn set_port_forward(&self, backend: Arc<dyn crate::portforward::PortForward>) {
        *self
            .port_forward
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(backend);
    }

    /// A write under the store's lock, its Secrets sealed by `enc` (the front's configuration;
    /// `None`: the in-process writer's) before the lock is let go.
    pub fn write<T>(
        &self,
        enc: Option<&Encrypting>,
        f: impl FnOnce(&mut Store) -> ApiResult<T>,
    ) -> ApiResult<T> {
        let mut store = self.store();
        let out = f(&mut store);
        store.seal(enc.map(|e| &*e.0));
        out
    }

    /// Wakes the watches after a write.
    pub fn notify(&self) {
        let rv = {
            let mut store = self.store();
            store.seal(None);
            // The ClusterRole aggregation controller follows every write.
            crate::authz::aggregate(&mut store);
            store.resource_version()
        };
        self.changed.send_replace(rv);
    }
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    typed_response(code, "application/json", body)
}

fn typed_response(code: StatusCode, content_type: &str, body: &Value) -> Response {
    let mut r = (code, body.to_string()).into_response();
    if let Ok(ct) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r
}

/// `Warning: 299 - "<text>"` headers, one per warning, as the apiserver sends them (kubectl
/// prints each as `Warning: <text>`).
fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = http::HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// `meta.k8s.io/v1` `PartialObjectMetadata` of an object (what `Api::get_metadata` asks for).
pub(crate) fn partial_metadata(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// What a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Version,
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiIndex,
    /// `/openapi/v3/{api/v1 | apis/g/v}`
    OpenApiDoc(String),
    CoreVersions,
    Groups,
    Group(String),
    Resources {
        group: String,
        version: String,
    },
    Collection {
        res: usize,
        ns: Option<String>,
    },
    Object {
        res: usize,
        ns: Option<String>,
        name: String,
        sub: Option<String>,
    },
}

fn parse_target(store: &Store, path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs[..] {
        ["version"] => return Some(Target::Version),
        ["openapi", "v2"] => return Some(Target::OpenApiV2),
        ["openapi", "v3"] => return Some(Target::OpenApiIndex),
        ["openapi", "v3", ref rest @ ..] => return Some(Target::OpenApiDoc(rest.join("/"))),
        ["api"] => return Some(Target::CoreVersions),
        ["apis"] => return Some(Target::Groups),
        ["apis", g] => return Some(Target::Group(g.to_owned())),
        ["api", v, ref rest @ ..] => ("", v, rest),
        ["apis", g, v, ref rest @ ..] => (g, v, rest),
        _ => return None,
    };
    let find = |plural: &str| store.type_index(group, version, plural);
    let namespaced = |plural: &str| find(plural).filter(|&i| store.types[i].namespaced);
    let cluster = |plural: &str| find(plural).filter(|&i| !store.types[i].namespaced);
    let obj = |res, ns: Option<&str>, name: &str, sub: Option<&str>| Target::Object {
        res,
        ns: ns.map(str::to_owned),
        name: name.to_owned(),
        sub: sub.map(str::to_owned),
    };
    Some(match *rest {
        [] => Target::Resources {
            group: group.to_owned(),
            version: version.to_owned(),
        },
        ["namespaces", ns, plural] if namespaced(plural).is_some() => Target::Collection {
            res: namespaced(plural)?,
            ns: Some(ns.to_owned()),
        },
        ["namespaces", ns, plural, name] => obj(namespaced(plural)?, Some(ns), name, None),
        ["namespaces", ns, plural, name, sub] => {
            obj(namespaced(plural)?, Some(ns), name, Some(sub))
        }
        // All namespaces (list and watch only), or a cluster-scoped collection.
        [plural] => Target::Collection {
            res: find(plural)?,
            ns: None,
        },
        [plural, name] => obj(cluster(plural)?, None, name, None),
        [plural, name, sub] => obj(cluster(plural)?, None, name, Some(sub)),
        _ => return None,
    })
}

/// Query parameters, last value wins.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        Query(
            url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn parse_json(body: &Bytes) -> ApiResult<Value> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// A create or replace body: JSON, or protobuf for the types kubectl's typed clients send so.
fn parse_object(
    headers: &HeaderMap,
    body: &Bytes,
    rt: &crate::resources::ResourceType,
) -> ApiResult<Value> {
    let ct = header_str(headers, header::CONTENT_TYPE);
    if ct.split(';').next().map(str::trim) == Some(crate::proto::CONTENT_TYPE) {
        return crate::proto::decode(body, rt);
    }
    parse_json(body)
}

/// Apply configurations are YAML (JSON is YAML too, and what kube-rs sends).
fn parse_apply(body: &Bytes) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply configuration is not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("the apply configuration is not YAML: {e}")))
}

/// The routes of a fake: `pods/portforward` (an upgrade, outside the request log), then every
/// other path.
pub(crate) fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/portforward",
            axum::routing::get(crate::portforward::handle),
        )
        .fallback(handle)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), admit))
        .with_state(shared)
}

/// Authentication and authorisation of the plain-HTTP port, which stands for kube-apiserver's
/// loopback connection: without credentials a request is the apiserver's privileged loopback
/// client (`system:masters`), as tests' own clients are; with a bearer token it is that token's
/// user, authorised as on the secure port. Requests the TLS front admitted pass as they are.
async fn admit(
    State(shared): State<Arc<Shared>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.extensions().get::<Admitted>().is_some() {
        return next.run(req).await;
    }
    let user = match crate::authn::bearer(req.headers()) {
        None => User::loopback(),
        Some(token) => match shared.authenticate_token(&token) {
            Some(u) => u,
            None => return ApiError::for_code(401, "Unauthorized").into_response(),
        },
    };
    if let Err(e) = shared.authorize(&user, req.method(), req.uri()) {
        return e.into_response();
    }
    req.extensions_mut().insert(Admitted(user));
    next.run(req).await
}

/// The handler behind every path.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    admitted: Option<axum::Extension<Admitted>>,
    encrypting: Option<axum::Extension<Encrypting>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = Query::parse(uri.query());
    let target = parse_target(&shared.store(), uri.path());
    let mut rec = Request {
        seq: 0,
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        verb: Verb::Discovery,
        resource: None,
        group: None,
        namespace: None,
        name: None,
        subresource: None,
        patch: None,
        field_manager: query.get("fieldManager").map(str::to_owned),
        user: admitted.as_ref().map(|a| a.0.0.name.clone()),
        status: 0,
    };
    let user = admitted.map(|a| a.0.0);
    let response = match &target {
        None => ApiError::no_route(uri.path()).into_response(),
        Some(t) => {
            describe(&shared, t, &method, &query, &headers, &mut rec);
            let fault = {
                let mut store = shared.store();
                let hit = store.faults.iter().position(|f| f.matches(&rec));
                hit.map(|i| {
                    let f = &mut store.faults[i];
                    if let Some(n) = &mut f.times {
                        *n -= 1;
                    }
                    f.code
                })
            };
            match fault {
                Some(code) => ApiError::for_code(code, "injected by the test").into_response(),
                None => serve(
                    &shared,
                    t,
                    &method,
                    &query,
                    &headers,
                    &body,
                    rec.verb,
                    encrypting.as_ref().map(|e| &e.0),
                    user.as_ref(),
                )
                .await
                .unwrap_or_else(IntoResponse::into_response),
            }
        }
    };
    rec.status = response.status().as_u16();
    {
        let mut store = shared.store();
        rec.seq = store.next_seq;
        store.next_seq += 1;
        tracing::debug!(
            method = %rec.method, path = %rec.path, status = rec.status, "kos-kube-fake"
        );
        store.requests.push(rec);
    }
    response
}

/// Fills the request record's verb and object coordinates.
fn describe(
    shared: &Shared,
    t: &Target,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    rec: &mut Request,
) {
    let store = shared.store();
    let (res, ns, name, sub) = match t {
        Target::Collection { res, ns } => (*res, ns.clone(), None, None),
        Target::Object { res, ns, name, sub } => {
            (*res, ns.clone(), Some(name.clone()), sub.clone())
        }
        _ => return,
    };
    let rt = &store.types[res];
    rec.resource = Some(rt.plural.clone());
    rec.group = Some(rt.group.clone());
    rec.namespace = ns;
    rec.subresource = sub;
    let collection = name.is_none();
    rec.name = name;
    rec.verb = match (method.as_str(), collection) {
        ("GET", true) if query.flag("watch") => Verb::Watch,
        ("GET", true) => Verb::List,
        ("GET", false) => Verb::Get,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::DeleteCollection,
        ("DELETE", false) => Verb::Delete,
        _ => Verb::Discovery,
    };
    if rec.verb == Verb::Patch {
        rec.patch = PatchType::from_content_type(header_str(headers, header::CONTENT_TYPE));
    }
}

fn write_ctx(
    query: &Query,
    headers: &HeaderMap,
    sub: Option<&str>,
    user: Option<&User>,
) -> ApiResult<WriteCtx> {
    let scope = match sub {
        None => Scope::Main,
        Some("status") => Scope::Status,
        Some("approval") => Scope::Approval,
        Some(other) => {
            return Err(ApiError::no_route(&format!("subresource {other:?}")));
        }
    };
    // Like the apiserver: an unnamed manager is the user agent up to its first `/`.
    let manager = query
        .get("fieldManager")
        .map(str::to_owned)
        .unwrap_or_else(|| {
            let ua = header_str(headers, header::USER_AGENT);
            ua.split('/')
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_owned()
        });
    Ok(WriteCtx {
        manager,
        scope,
        dry_run: query.get("dryRun") == Some("All"),
        keep_status: false,
        validation: Some(FieldValidation::from_query(query.get("fieldValidation"))?),
        warnings: Default::default(),
        user: user.cloned(),
    })
}

fn wants_partial_metadata(headers: &HeaderMap) -> bool {
    header_str(headers, header::ACCEPT).contains("as=PartialObjectMetadata")
}

/// How objects are answered: as stored, as `PartialObjectMetadata`, or as a `Table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Object,
    Metadata,
    Table(IncludeObject),
}

impl Form {
    fn of(headers: &HeaderMap, query: &Query) -> Form {
        let accept = header_str(headers, header::ACCEPT);
        if table::wants_table(accept) {
            Form::Table(IncludeObject::parse(query.get("includeObject")))
        } else if wants_partial_metadata(headers) {
            Form::Metadata
        } else {
            Form::Object
        }
    }
}

// One request's coordinates; grouping them would only move the list.
#[allow(clippy::too_many_arguments)]
async fn serve(
    shared: &Arc<Shared>,
    t: &Target,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    body: &Bytes,
    verb: Verb,
    enc: Option<&Encrypting>,
    user: Option<&User>,
) -> ApiResult<Response> {
    // A front's API server reads Secrets through its own transformers (plain HTTP, the loopback,
    // reads the store as it is).
    let readable = |res: usize, ns: Option<&str>, name: Option<&str>| match enc {
        Some(e) => shared.store().check_readable(res, ns, name, &e.0),
        None => Ok(()),
    };
    let form = Form::of(headers, query);
    let accept = header_str(headers, header::ACCEPT);
    let aggregated = discovery::wants_aggregated(accept);
    // One object in the form asked for; writes carry their warnings.
    let ok = |res: usize, code: StatusCode, v: Value, ctx: Option<&WriteCtx>| {
        let warnings = ctx.map(|c| c.warnings.borrow().clone()).unwrap_or_default();
        let r = match form {
            Form::Object => json_response(code, &v),
            Form::Metadata => json_response(code, &partial_metadata(&v)),
            Form::Table(include) => {
                let rt = shared.store().types[res].clone();
                let meta = json!({"resourceVersion": v.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                typed_response(
                    code,
                    table::TABLE_CONTENT_TYPE,
                    &table::table(&rt, std::slice::from_ref(&v), meta, true, include),
                )
            }
        };
        with_warnings(r, &warnings)
    };
    match t {
        Target::Version => Ok(json_response(StatusCode::OK, &discovery::version())),
        Target::OpenApiV2 => {
            let mut r = (StatusCode::OK, openapi::v2_document()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static(openapi::V2_PROTOBUF),
            );
            Ok(r)
        }
        Target::OpenApiIndex => Ok(json_response(
            StatusCode::OK,
            &openapi::index(&shared.store()),
        )),
        Target::OpenApiDoc(rest) => Ok(json_response(
            StatusCode::OK,
            &openapi::group_version(&shared.store(), rest)?,
        )),
        Target::CoreVersions if aggregated => Ok(typed_response(
            StatusCode::OK,
            discovery::AGGREGATED_CONTENT_TYPE,
            &discovery::aggregated(&shared.store(), true),
        )),
        Target::CoreVersions => Ok(json_response(StatusCode::OK, &discovery::core_versions())),
        Target::Groups if aggregated => Ok(typed_response(
            StatusCode::OK,
            discovery::AGGREGATED_CONTENT_TYPE,
            &discovery::aggregated(&shared.store(), false),
        )),
        Target::Groups => Ok(json_response(
            StatusCode::OK,
            &discovery::groups(&shared.store(), None)?,
        )),
        Target::Group(g) => Ok(json_response(
            StatusCode::OK,
            &discovery::groups(&shared.store(), Some(g))?,
        )),
        Target::Resources { group, version } => Ok(json_response(
            StatusCode::OK,
            &discovery::resources(&shared.store(), group, version)?,
        )),
        Target::Collection { res, ns } => {
            let res = *res;
            match verb {
                Verb::Watch => watch(shared, res, ns.clone(), query, form),
                Verb::List => {
                    readable(res, ns.as_deref(), None)?;
                    list(shared, res, ns.as_deref(), query, form)
                }
                Verb::Create => {
                    let Some(ns) = ns
                        .as_deref()
                        .or((!shared.store().types[res].namespaced).then_some(""))
                    else {
                        return Err(ApiError::method_not_allowed(
                            "create a namespaced object under /namespaces/<ns>/",
                        ));
                    };
                    let ctx = write_ctx(query, headers, None, user)?;
                    let rt = shared.store().types[res].clone();
                    let obj = parse_object(headers, body, &rt)?;
                    let created = shared.write(enc, |s| s.create(res, ns, obj, &ctx))?;
                    shared.notify();
                    Ok(ok(res, StatusCode::CREATED, created, Some(&ctx)))
                }
                Verb::DeleteCollection => {
                    let labels =
                        LabelSelector::parse(query.get("labelSelector").unwrap_or_default())?;
                    let fields =
                        FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())?;
                    let dry_run = query.get("dryRun") == Some("All");
                    let opts = parse_json(body)?;
                    let deleted = {
                        let mut store = shared.store();
                        let rt = store.types[res].clone();
                        let victims = store.list(res, ns.as_deref(), &labels, &fields);
                        let mut out = Vec::new();
                        for v in victims {
                            let vns = v
                                .pointer("/metadata/namespace")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned();
                            let vname = v
                                .pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned();
                            out.push(store.delete(res, &vns, &vname, &opts, dry_run)?);
                        }
                        store.seal(enc.map(|e| &*e.0));
                        json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": {"resourceVersion": store.resource_version().to_string()}, "items": out})
                    };
                    shared.notify();
                    Ok(json_response(StatusCode::OK, &deleted))
                }
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on a collection"
                ))),
            }
        }
        Target::Object { res, ns, name, sub } => {
            let res = *res;
            let ns = ns.as_deref().unwrap_or_default();
            let pods = shared.store().type_index("", "v1", "pods");
            if sub.as_deref() == Some("eviction") && Some(res) == pods && verb == Verb::Create {
                let eviction = parse_json(body)?;
                admit_node(shared, user, res, ns, name, "eviction", Some(&eviction))?;
                let status = crate::eviction::evict(&mut shared.store(), ns, name, &eviction)?;
                shared.notify();
                return Ok(json_response(StatusCode::CREATED, &status));
            }
            if sub.as_deref() == Some("binding") && Some(res) == pods && verb == Verb::Create {
                let binding = parse_json(body)?;
                let status = crate::binding::bind(&mut shared.store(), ns, name, &binding)?;
                shared.notify();
                return Ok(json_response(StatusCode::CREATED, &status));
            }
            let accounts = shared.store().type_index("", "v1", "serviceaccounts");
            if sub.as_deref() == Some("token") && Some(res) == accounts && verb == Verb::Create {
                let request = parse_json(body)?;
                admit_node(shared, user, res, ns, name, "token", Some(&request))?;
                let created = token_request(shared, ns, name, &request)?;
                return Ok(json_response(StatusCode::CREATED, &created));
            }
            let approval = sub.as_deref() == Some("approval")
                && crate::csr::is_csr(&shared.store().types[res]);
            if (sub.as_deref().is_some_and(|s| s != "status") && !approval)
                || (sub.is_some() && !shared.store().types[res].status_subresource)
            {
                return Err(ApiError::no_route(&format!(
                    "{}/{}",
                    name,
                    sub.as_deref().unwrap_or_default()
                )));
            }
            match verb {
                Verb::Get => {
                    let got = shared.store().get(res, ns, name)?;
                    readable(res, Some(ns), Some(name))?;
                    Ok(ok(res, StatusCode::OK, got, None))
                }
                Verb::Update => {
                    let ctx = write_ctx(query, headers, sub.as_deref(), user)?;
                    let rt = shared.store().types[res].clone();
                    let obj = parse_object(headers, body, &rt)?;
                    readable(res, Some(ns), Some(name))?;
                    let updated = shared.write(enc, |s| {
                        let out = s.update(res, ns, name, obj, &ctx)?;
                        if let Some(e) = enc {
                            s.reseal_stale(res, ns, name, &e.0);
                        }
                        Ok(out)
                    })?;
                    shared.notify();
                    Ok(ok(res, StatusCode::OK, updated, Some(&ctx)))
                }
                Verb::Patch => {
                    let ct = header_str(headers, header::CONTENT_TYPE);
                    let kind = PatchType::from_content_type(ct)
                        .ok_or_else(|| ApiError::unsupported_media_type(ct))?;
                    let ctx = write_ctx(query, headers, sub.as_deref(), user)?;
                    let patch = if kind == PatchType::Apply {
                        if query.get("fieldManager").is_none_or(str::is_empty) {
                            return Err(ApiError::bad_request(
                                "PATCH, application/apply-patch+yaml requires fieldManager to be set",
                            ));
                        }
                        parse_apply(body)?
                    } else {
                        parse_json(body)?
                    };
                    let force = query.flag("force");
                    readable(res, Some(ns), Some(name))?;
                    let patched =
                        shared.write(enc, |s| s.patch(res, ns, name, kind, &patch, force, &ctx))?;
                    shared.notify();
                    Ok(ok(res, StatusCode::OK, patched, Some(&ctx)))
                }
                Verb::Delete if sub.is_none() => {
                    let opts = parse_json(body)?;
                    admit_node(shared, user, res, ns, name, "", None)?;
                    let dry_run = query.get("dryRun") == Some("All")
                        || opts
                            .get("dryRun")
                            .and_then(Value::as_array)
                            .is_some_and(|a| a.iter().any(|x| x == "All"));
                    let deleted = shared.write(enc, |s| s.delete(res, ns, name, &opts, dry_run))?;
                    shared.notify();
                    Ok(ok(res, StatusCode::OK, deleted, None))
                }
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported here"
                ))),
            }
        }
    }
}

/// NodeRestriction on the writes that do not pass through the store's admission: deletes (the
/// stored object is the old one), evictions and TokenRequests (their bodies are not the type's).
pub(crate) fn admit_node(
    shared: &Shared,
    user: Option<&User>,
    res: usize,
    ns: &str,
    name: &str,
    subresource: &str,
    object: Option<&Value>,
) -> ApiResult<()> {
    let Some(user) = user else {
        return Ok(());
    };
    let store = shared.store();
    let rt = &store.types[res];
    let old = if object.is_none() {
        store.get(res, ns, name).ok()
    } else {
        None
    };
    let attrs = crate::noderestriction::Attributes {
        op: if object.is_none() {
            crate::noderestriction::Op::Delete
        } else {
            crate::noderestriction::Op::Create
        },
        group: &rt.group,
        resource: &rt.plural,
        subresource,
        namespace: ns,
        name,
        object,
        old: old.as_ref(),
    };
    crate::noderestriction::admit(&store, user, &attrs)
}

/// The TokenRequest API (`serviceaccounts/<name>/token`): a token of the ServiceAccount, valid
/// `spec.expirationSeconds` (default an hour, at least ten minutes, as the apiserver validates).
fn token_request(shared: &Shared, ns: &str, name: &str, request: &Value) -> ApiResult<Value> {
    let seconds = request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "TokenRequest.authentication.k8s.io \"{name}\" is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
            ),
        ));
    }
    let issued = {
        let store = shared.store();
        shared
            .tokens()
            .issue(&store, ns, name, chrono::Duration::seconds(seconds))
    };
    let (token, expires) = issued.map_err(|_| {
        let store = shared.store();
        match store.type_index("", "v1", "serviceaccounts") {
            Some(res) => ApiError::not_found(&store.types[res], name),
            None => ApiError::no_route("serviceaccounts"),
        }
    })?;
    let audiences = request
        .pointer("/spec/audiences")
        .cloned()
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": request.pointer("/spec/boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
    }))
}

fn list(
    shared: &Arc<Shared>,
    res: usize,
    ns: Option<&str>,
    query: &Query,
    form: Form,
) -> ApiResult<Response> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or_default())?;
    let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())?;
    let limit: Option<usize> = match query.get("limit") {
        None | Some("" | "0") => None,
        Some(l) => Some(
            l.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
    };
    let store = shared.store();
    let current = store.resource_version();
    let continue_from = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => Some(decode_continue(token, &store)?),
        None => {
            check_list_rv(query, current)?;
            None
        }
    };
    let rt = store.types[res].clone();
    let mut items = store.list(res, ns, &labels, &fields);
    let list_rv = continue_from.as_ref().map_or(current, |c| c.0);
    if let Some((_, after_ns, after_name)) = &continue_from {
        items.retain(|o| {
            let k = object_key(o);
            (k.0.as_str(), k.1.as_str()) > (after_ns.as_str(), after_name.as_str())
        });
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(l) = limit
        && items.len() > l
    {
        let remaining = items.len() - l;
        items.truncate(l);
        if let Some(last) = items.last() {
            let (lns, lname) = object_key(last);
            meta["continue"] = json!(encode_continue(list_rv, &lns, &lname));
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    if let Form::Table(include) = form {
        return Ok(typed_response(
            StatusCode::OK,
            table::TABLE_CONTENT_TYPE,
            &table::table(&rt, &items, meta, true, include),
        ));
    }
    let partial = form == Form::Metadata;
    if partial {
        items = items.iter().map(partial_metadata).collect();
    }
    let (api_version, kind) = if partial {
        (
            "meta.k8s.io/v1".to_owned(),
            "PartialObjectMetadataList".to_owned(),
        )
    } else {
        (rt.api_version(), format!("{}List", rt.kind))
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": items}),
    ))
}

/// `resourceVersion` / `resourceVersionMatch` of a list without a continue token. The store keeps
/// no old snapshots: an exact older version is gone (410); a future one is not there yet (504).
fn check_list_rv(query: &Query, current: u64) -> ApiResult<()> {
    let Some(rv) = query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
    else {
        return Ok(());
    };
    let rv: u64 = rv
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?;
    if rv > current {
        return Err(ApiError::new(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {current}"),
        ));
    }
    if query.get("resourceVersionMatch") == Some("Exact") && rv < current {
        return Err(ApiError::expired(format!(
            "too old resource version: {rv} ({current})"
        )));
    }
    Ok(())
}

fn object_key(o: &Value) -> (String, String) {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([rv, ns, name]).to_string())
}

fn decode_continue(token: &str, store: &Store) -> ApiResult<(u64, String, String)> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let (rv, ns, name): (u64, String, String) =
        serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if store.is_compacted(rv) {
        return Err(ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        ));
    }
    Ok((rv, ns, name))
}

fn watch(
    shared: &Arc<Shared>,
    res: usize,
    ns: Option<String>,
    query: &Query,
    form: Form,
) -> ApiResult<Response> {
    let since = match query.get("resourceVersion") {
        None | Some("" | "0") => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
        ),
    };
    let p = WatchParams {
        res,
        ns,
        labels: LabelSelector::parse(query.get("labelSelector").unwrap_or_default())?,
        fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())?,
        since,
        send_initial: query.flag("sendInitialEvents"),
        bookmarks: query.flag("allowWatchBookmarks"),
        timeout: watching::timeout(query.get("timeoutSeconds"))?,
        form,
    };
    let stream = watching::start(shared.clone(), p);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}
