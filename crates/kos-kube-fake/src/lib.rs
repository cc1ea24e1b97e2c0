//! kos-kube-fake: an in-process fake Kubernetes API server, so controllers are tested with the real
//! kube-rs client and runtime (`Api`, `Controller`, `watcher`, `reflector`, the event `Recorder`,
//! kube-lease-manager) unchanged, without a kube-apiserver binary, and so kubectl, a client kos
//! did not write, works against the simulated clusters as against a real one (`tests/kubectl.rs`).
//!
//! [`FakeKube::start`] serves plain HTTP on `127.0.0.1:0` (kube-rs's rustls connector speaks
//! `http://` URLs as is); [`FakeKube::client`] is a `kube::Client` for it. The server is generic
//! over resource types ([`ResourceType`], [`resources::builtin`]): objects are stored as JSON, and
//! every write bumps one global resourceVersion and wakes the watches.
//!
//! What it serves, per type: list (labelSelector, fieldSelector, limit/continue,
//! resourceVersion), streaming watch (from a resourceVersion, initial events, BOOKMARKs, 410 for a
//! compacted history), get, create (generateName), replace with optimistic concurrency, delete
//! (finalizers, preconditions), deletecollection, JSON / merge / strategic-merge patch, server-side
//! apply with field ownership and conflicts, the `/status` subresource, `PartialObjectMetadata`,
//! and the discovery documents. Errors are `v1/Status` bodies with the real codes and reasons.
//!
//! What kubectl needs besides: aggregated discovery (`apidiscovery.k8s.io/v2`) with short names
//! and categories; `/openapi/v3` documents that tell kubectl to leave validation to the server
//! (`fieldValidation` Strict, Warn or Ignore, against the types' own fields and CRD schemas);
//! `meta.k8s.io/v1` Tables with kube-apiserver's columns (`kubectl get`, `get -w`); request bodies
//! in protobuf for the types `kubectl create` makes; defaulting and Service allocations
//! (cluster IP, node ports) as the apiserver does them; `CustomResourceDefinition`s that serve
//! their resources at once; deletes with `propagationPolicy`, the garbage collector's cascade
//! done in the same request. The module docs of `store`, `patch`, `fields`, `watch`, `schema`,
//! `table`, `openapi`, `proto`, `crd`, `defaults` and `alloc` list what is simplified.
//!
//! Day two: `pods/portforward` over WebSocket to what a [`PortForward`] backend connects (module
//! `portforward`), and the Eviction API with PodDisruptionBudgets (module `eviction`;
//! [`FakeKube::reconcile_disruption_budgets`] is the disruption controller's pass).
//!
//! Storage: PersistentVolumes, PersistentVolumeClaims, VolumeAttachments, CSINodes, CSIDrivers
//! and StorageClasses with kube-apiserver's validation, strategies and admission (module
//! `storage`); [`FakeKube::reconcile_storage_protection`] is the protection controllers' pass.
//!
//! Authorisation: every request is authorised as kube-apiserver's `Node,RBAC` chain does
//! (modules `authz` and `nodeauth`; the default roles of module `policy` exist from the start),
//! and a kubelet's writes pass the NodeRestriction admission plugin (module `noderestriction`).
//! [`FakeKube::client`] is the privileged loopback client (`system:masters`);
//! [`FakeKube::service_account_client`] and [`FakeKube::service_account_token`] act as a
//! ServiceAccount, [`FakeKube::user_client`] and [`FakeKube::acting_as`] (in process) as any
//! user, and the TLS front ([`FakeKube::serve_tls`]) as the user its client certificate or token
//! names.
//!
//! For tests: [`FakeKube::insert`], [`FakeKube::get`], [`FakeKube::modify`], [`FakeKube::events`]
//! (what controllers recorded), [`FakeKube::requests`] / [`FakeKube::writes`] (the request log) and
//! [`FakeKube::inject`] (faults).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::Node;
//! use kos_kube_fake::FakeKube;
//!
//! let fake = FakeKube::start().await?;
//! let nodes: kube::Api<Node> = kube::Api::all(fake.client()?);
//! let mut n = Node::default();
//! n.metadata.name = Some("n1".into());
//! nodes.create(&Default::default(), &n).await?;
//! assert!(fake.get::<Node>(None, "n1")?.is_some());
//! assert_eq!(fake.writes().len(), 1);
//! # Ok(()) }
//! ```

mod acting;
mod alloc;
mod authn;
mod authz;
mod binding;
mod cel;
mod crd;
mod csr;
mod defaults;
mod discovery;
pub mod encryption;
pub mod error;
mod eviction;
mod fields;
pub mod log;
mod nodeauth;
mod noderestriction;
mod openapi;
mod patch;
mod policy;
pub mod portforward;
mod proto;
pub mod quantity;
pub mod resources;
mod schema;
mod selectors;
mod server;
pub mod snapshot;
mod storage;
mod store;
mod strategy;
mod table;
pub mod tls;
mod validate;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use acting::Acting;
pub use authz::User;
pub use encryption::EncryptionConfig;
pub use error::{ApiError, Cause, Details};
pub use log::{Fault, PatchType, Request, Verb};
pub use portforward::{ForwardError, PodStream, PortForward};
pub use resources::{NameRule, ResourceType};
pub use snapshot::{AtRest, Snapshot, SnapshotObject};
pub use tls::{TlsFront, TlsServing};

use server::Shared;
use store::{Scope, Store, WriteCtx};

/// How a fake behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// How often a watch that allows bookmarks gets one (the real server: about a minute).
    pub bookmark_interval: Duration,
    /// How many changes the history keeps for watches to resume from (older: 410).
    pub history: usize,
    /// The served types.
    pub resources: Vec<ResourceType>,
    /// Where Services get their cluster IPs (`--service-cluster-ip-range`; kubeadm's default).
    pub service_cidr: ipnet::Ipv4Net,
    /// The Kubernetes minor (1.x) modelled where behaviour differs between the supported ones
    /// (feature gates whose default changed: `MutableCSINodeAllocatableCount` from 35).
    pub minor: u32,
}

/// The minor a fake behaves as unless told: the newest kos supports.
pub const DEFAULT_MINOR: u32 = 36;

impl Default for Config {
    fn default() -> Config {
        Config {
            bookmark_interval: Duration::from_secs(5),
            history: 10_000,
            resources: resources::builtin(),
            service_cidr: ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(10, 96, 0, 0), 12)
                .unwrap_or_default(),
            minor: DEFAULT_MINOR,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    #[error("cannot start the fake API server")]
    Start(#[source] std::io::Error),
    #[error("{kind} is not served by the fake: add its ResourceType to Config::resources")]
    UnknownType { kind: String },
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    UnknownKind { api_version: String, kind: String },
    #[error("cannot convert {what} to or from JSON")]
    Convert {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot build a kube client for the fake")]
    Client(#[source] kube::Error),
    #[error("cannot make a URL of the fake's address: {0}")]
    Uri(String),
    #[error("cannot serve the fake over TLS: {0}")]
    Tls(String),
}

/// One Event a controller recorded, from `events.k8s.io/v1` or `core/v1` alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// `events.k8s.io/v1` or `v1`.
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    /// `note` (events.k8s.io) or `message` (core).
    pub message: String,
    pub action: Option<String>,
    pub regarding_kind: Option<String>,
    pub regarding_name: Option<String>,
    pub regarding_namespace: Option<String>,
    pub reporting_controller: Option<String>,
    /// How often it was observed (`series.count`, or `count`), at least 1.
    pub count: i64,
}

impl RecordedEvent {
    fn from_json(v: &Value) -> RecordedEvent {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let core = v.get("apiVersion").and_then(Value::as_str) == Some("v1");
        let regarding = if core { "involvedObject" } else { "regarding" };
        let count = if core {
            v.get("count").and_then(Value::as_i64)
        } else {
            v.pointer("/series/count").and_then(Value::as_i64)
        };
        RecordedEvent {
            api_version: s("/apiVersion").unwrap_or_default(),
            namespace: s("/metadata/namespace").unwrap_or_default(),
            name: s("/metadata/name").unwrap_or_default(),
            type_: s("/type").unwrap_or_default(),
            reason: s("/reason").unwrap_or_default(),
            message: if core { s("/message") } else { s("/note") }.unwrap_or_default(),
            action: s("/action"),
            regarding_kind: s(&format!("/{regarding}/kind")),
            regarding_name: s(&format!("/{regarding}/name")),
            regarding_namespace: s(&format!("/{regarding}/namespace")),
            reporting_controller: if core {
                s("/reportingComponent").or_else(|| s("/source/component"))
            } else {
                s("/reportingController")
            },
            count: count.unwrap_or(1).max(1),
        }
    }
}

/// A running fake API server. Dropping it stops the server and ends open watches.
pub struct FakeKube {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKube")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn to_json<K: Serialize>(obj: &K, what: &str) -> Result<Value, FakeError> {
    serde_json::to_value(obj).map_err(|source| FakeError::Convert {
        what: what.to_owned(),
        source,
    })
}

fn from_json<K: DeserializeOwned>(v: Value, what: &str) -> Result<K, FakeError> {
    serde_json::from_value(v).map_err(|source| FakeError::Convert {
        what: what.to_owned(),
        source,
    })
}

/// A store with the built-in types and, with `policy`, the bootstrap RBAC objects.
#[cfg(test)]
fn test_store(policy: bool) -> store::Store {
    let mut s = store::Store::new(
        resources::builtin(),
        100,
        ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(10, 96, 0, 0), 12).expect("cidr"),
    );
    if policy {
        for (plural, obj) in policy::objects() {
            test_put(&mut s, "rbac.authorization.k8s.io", plural, obj);
        }
    }
    s
}

/// Creates `obj` (of `group`/v1 `plural`) in its own namespace, as a test-side write.
#[cfg(test)]
fn test_put(
    s: &mut store::Store,
    group: &str,
    plural: &str,
    obj: serde_json::Value,
) -> serde_json::Value {
    let res = s.type_index(group, "v1", plural).expect("a served type");
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    s.create(res, &ns, obj, &test_ctx(Scope::Everything))
        .expect("created")
}

/// Test-side writes are not requests: they are neither logged nor hit by faults.
fn test_ctx(scope: Scope) -> WriteCtx {
    WriteCtx {
        manager: "kos-kube-fake".into(),
        scope,
        dry_run: false,
        keep_status: true,
        validation: None,
        warnings: Default::default(),
        user: None,
    }
}

impl FakeKube {
    /// Starts a fake serving the [built-in](resources::builtin) types.
    pub async fn start() -> Result<FakeKube, FakeError> {
        FakeKube::start_with(Config::default()).await
    }

    pub async fn start_with(config: Config) -> Result<FakeKube, FakeError> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(FakeError::Start)?;
        FakeKube::serve(listener, config)
    }

    /// As [`FakeKube::start_with`], from synchronous code that runs inside a tokio runtime (the
    /// simulated clusters of kos-guest are made while their caller holds its state lock). Outside a
    /// runtime it is [`FakeError::Start`].
    pub fn start_sync(config: Config) -> Result<FakeKube, FakeError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| FakeError::Start(std::io::Error::other(e)))?;
        let std_listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(FakeError::Start)?;
        std_listener
            .set_nonblocking(true)
            .map_err(FakeError::Start)?;
        let _entered = handle.enter();
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(FakeError::Start)?;
        FakeKube::serve(listener, config)
    }

    fn serve(listener: tokio::net::TcpListener, config: Config) -> Result<FakeKube, FakeError> {
        let addr = listener.local_addr().map_err(FakeError::Start)?;
        let mut store = Store::new(
            config.resources.clone(),
            config.history,
            config.service_cidr,
        );
        store.minor = config.minor;
        // kube-apiserver's `rbac/bootstrap-roles`: the default roles and bindings exist at start.
        for (plural, obj) in policy::objects() {
            let ns = obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if let Some(res) = store.type_index("rbac.authorization.k8s.io", "v1", plural)
                && let Err(e) = store.create(res, &ns, obj, &test_ctx(Scope::Everything))
            {
                tracing::debug!("kos-kube-fake: bootstrap policy: {e}");
            }
        }
        let shared = Arc::new(Shared::new(store, config));
        let app = server::router(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("kos-kube-fake stopped: {e}");
            }
        });
        Ok(FakeKube {
            shared,
            addr,
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube-rs client for the fake (call it inside a tokio runtime, as any `kube::Client`).
    pub fn client(&self) -> Result<kube::Client, FakeError> {
        let uri: http::Uri = self
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| FakeError::Uri(e.to_string()))?;
        kube::Client::try_from(kube::Config::new(uri)).map_err(FakeError::Client)
    }

    /// A token of the ServiceAccount `ns/name`, as the kubelet gets one for a pod that runs as it
    /// (TokenRequest with the apiserver's extended expiration: a year). Present it as a bearer
    /// token, on the TLS front or on [`FakeKube::url`]; it authenticates while the ServiceAccount
    /// exists.
    ///
    /// # Errors
    /// [`FakeError::Api`] 404 when the ServiceAccount does not exist (the pod would not start).
    pub fn service_account_token(&self, ns: &str, name: &str) -> Result<String, FakeError> {
        let store = self.shared.store();
        let issued = self
            .shared
            .tokens()
            .issue(&store, ns, name, authn::EXTENDED_TOKEN_LIFETIME);
        match issued {
            Ok((token, _)) => Ok(token),
            Err(authn::IssueError::NoServiceAccount) => {
                let res = store
                    .type_index("", "v1", "serviceaccounts")
                    .ok_or_else(|| FakeError::UnknownType {
                        kind: "ServiceAccount".into(),
                    })?;
                Err(ApiError::not_found(&store.types[res], name).into())
            }
        }
    }

    /// A kube-rs client of [`FakeKube::url`] authenticated as the ServiceAccount `ns/name` (its
    /// requests are authorised by RBAC, where [`FakeKube::client`]'s are the privileged loopback
    /// client's).
    ///
    /// # Errors
    /// As [`FakeKube::service_account_token`], or [`FakeError::Client`].
    pub fn service_account_client(&self, ns: &str, name: &str) -> Result<kube::Client, FakeError> {
        let token = self.service_account_token(ns, name)?;
        self.token_client(token, Some(ns))
    }

    /// A kube-rs client of [`FakeKube::url`] sending `token`, in `namespace` by default.
    pub(crate) fn token_client(
        &self,
        token: String,
        namespace: Option<&str>,
    ) -> Result<kube::Client, FakeError> {
        let uri: http::Uri = self
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| FakeError::Uri(e.to_string()))?;
        let mut config = kube::Config::new(uri);
        config.auth_info.token = Some(secrecy::SecretString::from(token));
        if let Some(ns) = namespace {
            config.default_namespace = ns.to_owned();
        }
        kube::Client::try_from(config).map_err(FakeError::Client)
    }

    pub(crate) fn index_of<K: Resource<DynamicType = ()>>(&self) -> Result<usize, FakeError> {
        self.shared
            .store()
            .type_index(&K::group(&()), &K::version(&()), &K::plural(&()))
            .ok_or_else(|| FakeError::UnknownType {
                kind: K::kind(&()).into_owned(),
            })
    }

    /// Creates `obj` as a client would (validated, with server metadata, watchers notified), but
    /// keeping any `status` it carries and without a request log entry.
    pub fn insert<K>(&self, obj: &K) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let res = self.index_of::<K>()?;
        let v = to_json(obj, &K::kind(&()))?;
        let ns = obj.meta().namespace.clone().unwrap_or_default();
        let created = self
            .shared
            .store()
            .create(res, &ns, v, &test_ctx(Scope::Everything))?;
        self.shared.notify();
        from_json(created, &K::kind(&()))
    }

    /// The stored object, `ns` `None` for cluster-scoped types.
    pub fn get<K>(&self, ns: Option<&str>, name: &str) -> Result<Option<K>, FakeError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let res = self.index_of::<K>()?;
        match self.shared.store().get(res, ns.unwrap_or_default(), name) {
            Ok(v) => from_json(v, &K::kind(&())).map(Some),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Every stored object of a type, in one namespace or all (`None`).
    pub fn list<K>(&self, ns: Option<&str>) -> Result<Vec<K>, FakeError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let res = self.index_of::<K>()?;
        let items = self
            .shared
            .store()
            .list(res, ns, &Default::default(), &Default::default());
        items
            .into_iter()
            .map(|v| from_json(v, &K::kind(&())))
            .collect()
    }

    /// Changes an object in place, spec and status alike (what kubelet or a user would do to it),
    /// as one write that watchers see.
    pub fn modify<K>(
        &self,
        ns: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut K),
    ) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let res = self.index_of::<K>()?;
        let ns = ns.unwrap_or_default();
        let mut obj: K = from_json(self.shared.store().get(res, ns, name)?, &K::kind(&()))?;
        change(&mut obj);
        let mut v = to_json(&obj, &K::kind(&()))?;
        // Unconditional: the test means to overwrite whatever is there now.
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let updated = self
            .shared
            .store()
            .update(res, ns, name, v, &test_ctx(Scope::Everything))?;
        self.shared.notify();
        from_json(updated, &K::kind(&()))
    }

    /// Deletes like a client (finalizers are honoured), as no user: a test's own hand; a simulated
    /// component deletes as its user ([`Acting::delete`]).
    pub fn delete<K>(&self, ns: Option<&str>, name: &str) -> Result<(), FakeError>
    where
        K: Resource<DynamicType = ()>,
    {
        let res = self.index_of::<K>()?;
        self.shared
            .store()
            .delete(res, ns.unwrap_or_default(), name, &Value::Null, false)?;
        self.shared.notify();
        Ok(())
    }

    /// Server-side applies an object given as JSON (`apiVersion`, `kind`, `metadata.name`, and
    /// `metadata.namespace` for namespaced types), as `kubectl apply --server-side` would: creates it
    /// when absent, else merges the fields `manager` owns. Not a request: neither logged nor hit by
    /// faults, and written by no user (no authorisation, no admission that looks at one): a
    /// test's set-up; a simulated component applies as its user ([`Acting::apply_json`]). A type
    /// the fake does not serve is [`FakeError::UnknownKind`], as a real server answers `no matches
    /// for kind` for a type it lacks.
    pub fn apply_json(&self, obj: &Value, manager: &str) -> Result<Value, FakeError> {
        let s = |field: &str| obj.get(field).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (s("apiVersion"), s("kind"));
        let mut store = self.shared.store();
        let res = store
            .type_of_kind(api_version, kind)
            .ok_or_else(|| FakeError::UnknownKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })?;
        let meta = |field: &str| {
            obj.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (name, ns) = (meta("name"), meta("namespace"));
        let ctx = WriteCtx {
            manager: manager.to_owned(),
            scope: Scope::Main,
            dry_run: false,
            keep_status: false,
            validation: None,
            warnings: Default::default(),
            user: None,
        };
        // Forced, as `kubectl apply --server-side --force-conflicts`: the applier takes over fields.
        let applied = store.patch(res, &ns, &name, PatchType::Apply, obj, true, &ctx);
        drop(store);
        self.shared.notify();
        Ok(applied?)
    }

    /// Every stored object of a served type given by `apiVersion` and `kind`, as JSON, in one
    /// namespace or all (`None`).
    pub fn list_json(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
    ) -> Result<Vec<Value>, FakeError> {
        let store = self.shared.store();
        let res = store
            .type_of_kind(api_version, kind)
            .ok_or_else(|| FakeError::UnknownKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })?;
        Ok(store.list(res, ns, &Default::default(), &Default::default()))
    }

    /// The Events recorded so far (both Event APIs), oldest write first.
    pub fn events(&self) -> Vec<RecordedEvent> {
        let store = self.shared.store();
        let mut all: Vec<Value> = store
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == "Event")
            .flat_map(|(i, _)| store.list(i, None, &Default::default(), &Default::default()))
            .collect();
        let rv = |v: &Value| {
            v.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or_default()
        };
        all.sort_by_key(rv);
        all.iter().map(RecordedEvent::from_json).collect()
    }

    /// Every request served so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.store().requests.clone()
    }

    /// The accepted writes among [`FakeKube::requests`].
    pub fn writes(&self) -> Vec<Request> {
        self.shared
            .store()
            .requests
            .iter()
            .filter(|r| r.is_write())
            .cloned()
            .collect()
    }

    /// Forgets the request log (the sequence numbers keep counting).
    pub fn clear_requests(&self) {
        self.shared.store().requests.clear();
    }

    /// Where `pods/portforward` connects pods' ports (see [`PortForward`]).
    pub fn set_port_forward(&self, backend: Arc<dyn PortForward>) {
        self.shared.set_port_forward(backend);
    }

    /// The disruption controller's pass: every PodDisruptionBudget's status (`disruptionsAllowed`
    /// and the counts behind it) computed from the pods as they are now.
    pub fn reconcile_disruption_budgets(&self) -> Result<(), FakeError> {
        let changed = eviction::reconcile_budgets(&mut self.shared.store())?;
        if changed {
            self.shared.notify();
        }
        Ok(())
    }

    /// The pvc-protection and pv-protection controllers' pass: a claim or volume being deleted
    /// loses its protection finalizer (and goes) once nothing uses it: no scheduled pod names the
    /// claim, the volume is not `Bound`.
    pub fn reconcile_storage_protection(&self) -> Result<(), FakeError> {
        let changed = storage::reconcile_protection(&mut self.shared.store())?;
        if changed {
            self.shared.notify();
        }
        Ok(())
    }

    /// Makes matching requests fail (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        self.shared.store().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.shared.store().faults.clear();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// Drops the change history, as etcd compaction does: watches resuming from an earlier
    /// resourceVersion get 410 Gone and must relist.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Stops serving; open watches end.
    pub async fn stop(mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
