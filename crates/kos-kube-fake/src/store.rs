//! The object store: every object as JSON, keyed by (type, namespace, name), one global
//! resourceVersion counter, and the history of changes that watches replay.
//!
//! Invariants kept here, as the real API server keeps them:
//! - every successful write bumps the global resourceVersion by one and appends one change;
//!   a write that changes nothing is not a write (no bump, no event);
//! - identity and server-owned metadata (`uid`, `creationTimestamp`, `deletionTimestamp`,
//!   `resourceVersion`, `managedFields`, `generation`) are the server's, whatever the client sends;
//! - an object with finalizers is only marked for deletion; it goes when the last finalizer does;
//! - on types with a status subresource, the main resource never changes `status` and `/status`
//!   changes nothing else.
//!
//! What the apiserver does to every object it stores is in [`Store::admit`]: decoding (unknown
//! fields, `fieldValidation`), defaulting, Service allocations, a CRD's status. Deleting follows
//! the request's `propagationPolicy` with the garbage collector's effect done at once: dependents
//! (objects whose `ownerReferences` name the deleted object's UID) are deleted (`Background`,
//! the default; `Foreground` first marks the owner with the `foregroundDeletion` finalizer) or
//! freed of that reference (`Orphan`), each as the garbage collector's ServiceAccount
//! (`kube-system/generic-garbage-collector`) is authorised to: what it may not touch stays.
//!
//! Not kept: snapshot reads. A paginated list reads the current state on every page, and a list at
//! an older exact resourceVersion is answered 410 (the store has no MVCC history, only the change
//! log that watches need).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ipnet::Ipv4Net;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::fields::{Manager, Operation, Ownership};
use crate::log::{Fault, Request};
use crate::resources::ResourceType;
use crate::schema::{self, FieldValidation, Write};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::{alloc, crd, defaults, patch, validate};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub res: usize,
    /// `""` for cluster-scoped objects.
    pub ns: String,
    pub name: String,
}

#[derive(Debug, Clone)]
struct Stored {
    obj: Value,
    owners: Ownership,
}

impl Key {
    /// Every key of type `res`, in the map's order (type, namespace, name).
    fn of_type(res: usize) -> std::ops::Range<Key> {
        let at = |res| Key {
            res,
            ns: String::new(),
            name: String::new(),
        };
        at(res)..at(res + 1)
    }
}

/// The stored objects, and a count of the writes to each type. Every insert and remove goes
/// through here (the map is read through `Deref` only), so what is built from one type's objects
/// (the RBAC authorizer's view) knows when it is stale.
#[derive(Debug, Default)]
struct Objects {
    map: BTreeMap<Key, Stored>,
    writes: BTreeMap<usize, u64>,
}

impl std::ops::Deref for Objects {
    type Target = BTreeMap<Key, Stored>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Objects {
    fn insert(&mut self, key: Key, stored: Stored) -> Option<Stored> {
        *self.writes.entry(key.res).or_default() += 1;
        self.map.insert(key, stored)
    }

    fn remove(&mut self, key: &Key) -> Option<Stored> {
        *self.writes.entry(key.res).or_default() += 1;
        self.map.remove(key)
    }

    /// How many writes type `res` has seen.
    fn writes(&self, res: usize) -> u64 {
        self.writes.get(&res).copied().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One entry of the change history.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub rv: u64,
    pub res: usize,
    pub ns: String,
    pub kind: ChangeKind,
    /// The new state (the last state, with the deletion's resourceVersion, for `Deleted`).
    pub object: Value,
    /// The state before, for `Modified`: a watch with a selector turns a change into ADDED or
    /// DELETED when the object starts or stops matching.
    pub old: Option<Value>,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource: on types with a status subresource, `status` is kept as stored.
    Main,
    /// `/status`: only `status` is taken from the request.
    Status,
    /// A CertificateSigningRequest's `/approval`: only its conditions are taken ([`crate::csr`]).
    Approval,
    /// Test helpers: everything.
    Everything,
}

#[derive(Debug, Clone)]
pub(crate) struct WriteCtx {
    pub manager: String,
    pub scope: Scope,
    pub dry_run: bool,
    /// Test inserts keep the status they bring even where the server would clear it.
    pub keep_status: bool,
    /// The request's `fieldValidation`; `None` for test-side writes, which are stored as given.
    pub validation: Option<FieldValidation>,
    /// What the response's `Warning` headers say (unknown fields under `Warn`).
    pub warnings: RefCell<Vec<String>>,
    /// Who writes, for the admission plugins that look (NodeRestriction); `None` for the
    /// fake's own and test-side writes.
    pub user: Option<crate::authz::User>,
}

impl WriteCtx {
    fn who(&self, op: Operation) -> Manager {
        Manager {
            name: self.manager.clone(),
            operation: op,
            subresource: self.scope.subresource().into(),
        }
    }
}

impl Scope {
    /// The subresource a write through this scope names (`""` for the main resource).
    pub(crate) fn subresource(self) -> &'static str {
        match self {
            Scope::Status => "status",
            Scope::Approval => "approval",
            Scope::Main | Scope::Everything => "",
        }
    }
}

/// Everything the fake holds, behind one lock (no `.await` while it is held).
#[derive(Debug)]
pub(crate) struct Store {
    pub types: Vec<ResourceType>,
    objects: Objects,
    /// [`Store::rbac_view`]'s last view and the RBAC writes it was built after.
    rbac_view: std::sync::Mutex<Option<(u64, std::sync::Arc<crate::authz::RbacView>)>>,
    rv: u64,
    log: VecDeque<Change>,
    history: usize,
    /// Every change with a resourceVersion above this is in `log`.
    compacted: u64,
    pub requests: Vec<Request>,
    pub faults: Vec<Fault>,
    pub next_seq: u64,
    /// Where Services' cluster IPs come from.
    service_cidr: Ipv4Net,
    /// What etcd holds of each Secret: the resourceVersion it was sealed at and the bytes
    /// ([`crate::encryption`]).
    at_rest: BTreeMap<Key, (String, Vec<u8>)>,
    /// The writer of in-process and loopback writes (the newest API server's configuration).
    pub encryption: std::sync::Arc<crate::encryption::EncryptionConfig>,
    /// The Kubernetes minor whose behaviour is modelled where it differs ([`crate::Config::minor`]).
    pub minor: u32,
    /// The ClusterRole writes after which the aggregation controller last found nothing to
    /// do ([`crate::authz::aggregate`]): until the next one, it has nothing to look at.
    pub aggregated_after: Option<u64>,
}

/// The etcd key kube-apiserver stores an object under (`/registry/secrets/<ns>/<name>`).
fn storage_key(k: &Key) -> String {
    format!("/registry/secrets/{}/{}", k.ns, k.name)
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Propagation {
    Orphan,
    Background,
    Foreground,
}

const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // Made an object just above.
        _ => unreachable!("metadata is an object"),
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn finalizers_empty(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

/// The object without what changes on every write, for no-op detection.
fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    let m = meta_mut(&mut o);
    m.remove("resourceVersion");
    m.remove("managedFields");
    o
}

/// Anything but metadata and status changed: the spec generation moves.
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

fn generated_name(prefix: &str) -> String {
    use rand::Rng;
    // The apiserver's alphabet: no vowels (no words), no confusable characters.
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{prefix}{suffix}")
}

impl Store {
    pub fn new(types: Vec<ResourceType>, history: usize, service_cidr: Ipv4Net) -> Store {
        Store {
            types,
            objects: Objects::default(),
            rbac_view: std::sync::Mutex::new(None),
            // A real cluster never starts at 0; neither should clients assume it does.
            rv: 1000,
            log: VecDeque::new(),
            history: history.max(1),
            compacted: 1000,
            requests: Vec::new(),
            faults: Vec::new(),
            next_seq: 1,
            service_cidr,
            at_rest: BTreeMap::new(),
            encryption: Default::default(),
            minor: crate::DEFAULT_MINOR,
            aggregated_after: None,
        }
    }

    /// The feature gates of the minor this store behaves as.
    fn gates(&self) -> crate::storage::Gates {
        crate::storage::Gates::of_minor(self.minor)
    }

    fn secrets(&self) -> Option<usize> {
        self.type_index("", "v1", "secrets")
    }

    /// Seals every Secret written since the last seal with `writer` (the API server that wrote
    /// it), and forgets the deleted: called while the lock of the write is still held.
    pub fn seal(&mut self, writer: Option<&crate::encryption::EncryptionConfig>) {
        let Some(res) = self.secrets() else { return };
        let default = self.encryption.clone();
        let writer = writer.unwrap_or(&default);
        let live: Vec<(Key, String, Value)> = self
            .objects
            .range(Key::of_type(res))
            .filter_map(|(k, s)| {
                let rv = meta_str(&s.obj, "resourceVersion").unwrap_or_default();
                let fresh = self.at_rest.get(k).is_none_or(|(have, _)| have != rv);
                fresh.then(|| (k.clone(), rv.to_owned(), s.obj.clone()))
            })
            .collect();
        for (k, rv, obj) in live {
            let plain = serde_json::to_vec(&obj).unwrap_or_default();
            let sealed = writer.seal("secrets", &storage_key(&k), &plain);
            self.at_rest.insert(k, (rv, sealed));
        }
        let objects = &self.objects;
        self.at_rest.retain(|k, _| objects.contains_key(k));
    }

    /// Whether the API server configured with `reader` can read the Secrets `name` names (all in
    /// `ns` for `None`), as its prefix transformer decides; kube-apiserver's 500 when it cannot.
    pub fn check_readable(
        &mut self,
        res: usize,
        ns: Option<&str>,
        name: Option<&str>,
        reader: &crate::encryption::EncryptionConfig,
    ) -> ApiResult<()> {
        if Some(res) != self.secrets() {
            return Ok(());
        }
        self.seal(None);
        for (k, (_, stored)) in &self.at_rest {
            if ns.is_some_and(|n| n != k.ns) || name.is_some_and(|n| n != k.name) {
                continue;
            }
            let key = storage_key(k);
            if let Err(why) = reader.open("secrets", &key, stored) {
                return Err(ApiError::internal(format!(
                    "unable to transform key {key:?}: {why}"
                )));
            }
        }
        Ok(())
    }

    /// An update through an API server whose first provider did not write the stored value: the
    /// apiserver's storage writes it again even when the object is unchanged (its transformer
    /// reports the value stale), which is what re-encrypting every Secret after a key change
    /// relies on.
    pub fn reseal_stale(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        writer: &crate::encryption::EncryptionConfig,
    ) {
        if Some(res) != self.secrets() {
            return;
        }
        let key = self.key(res, ns, name);
        let Some(obj) = self.objects.get(&key).map(|s| s.obj.clone()) else {
            return;
        };
        let plain = serde_json::to_vec(&obj).unwrap_or_default();
        let fresh = writer.seal("secrets", &storage_key(&key), &plain);
        let stale = self.at_rest.get(&key).is_none_or(|(_, have)| {
            let prefix = |b: &[u8]| {
                b.strip_prefix(b"k8s:enc:").and_then(|r| {
                    let mut end = 0;
                    for _ in 0..3 {
                        end += r.get(end..)?.iter().position(|&c| c == b':')? + 1;
                    }
                    Some(r[..end].to_vec())
                })
            };
            prefix(have) != prefix(&fresh)
        });
        if stale {
            let rv = meta_str(&obj, "resourceVersion")
                .unwrap_or_default()
                .to_owned();
            self.at_rest.insert(key, (rv, fresh));
        }
    }

    /// Puts back what a snapshot says etcd held, for the Secrets the store holds.
    pub fn restore_at_rest(&mut self, items: impl Iterator<Item = (String, String, Vec<u8>)>) {
        let Some(res) = self.secrets() else { return };
        for (ns, name, bytes) in items {
            let key = self.key(res, &ns, &name);
            if let Some(s) = self.objects.get(&key) {
                let rv = meta_str(&s.obj, "resourceVersion")
                    .unwrap_or_default()
                    .to_owned();
                self.at_rest.insert(key, (rv, bytes));
            }
        }
    }

    /// What etcd holds of every Secret: `(namespace, name, bytes)`.
    pub fn at_rest(&mut self) -> Vec<(String, String, Vec<u8>)> {
        self.seal(None);
        self.at_rest
            .iter()
            .map(|(k, (_, b))| (k.ns.clone(), k.name.clone(), b.clone()))
            .collect()
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The RBAC authorizer's view of the roles and bindings, built again only after a write to
    /// one of them (the writes of the four types only grow, so their sum names one state).
    pub fn rbac_view(&self) -> std::sync::Arc<crate::authz::RbacView> {
        let writes: u64 = [
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        ]
        .iter()
        .filter_map(|p| self.type_index("rbac.authorization.k8s.io", "v1", p))
        .map(|r| self.objects.writes(r))
        .sum();
        let mut cache = self
            .rbac_view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, view)) = &*cache
            && *at == writes
        {
            return view.clone();
        }
        let view = std::sync::Arc::new(crate::authz::RbacView::build(self));
        *cache = Some((writes, view.clone()));
        view
    }

    /// How many writes (creates, updates, deletes) objects of type `res` have seen.
    pub fn writes_of(&self, res: usize) -> u64 {
        self.objects.writes(res)
    }

    pub fn type_index(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.types.iter().position(|t| {
            t.is_served() && t.group == group && t.version == version && t.plural == plural
        })
    }

    /// The served type of an object's `apiVersion` and `kind`.
    pub fn type_of_kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.types
            .iter()
            .position(|t| t.is_served() && t.api_version() == api_version && t.kind == kind)
    }

    /// The types that answer requests now.
    pub fn served(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.iter().filter(|t| t.is_served())
    }

    fn key(&self, res: usize, ns: &str, name: &str) -> Key {
        Key {
            res,
            ns: if self.types[res].namespaced {
                ns.to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    pub fn get(&self, res: usize, ns: &str, name: &str) -> ApiResult<Value> {
        self.objects
            .get(&self.key(res, ns, name))
            .map(|s| s.obj.clone())
            .ok_or_else(|| ApiError::not_found(&self.types[res], name))
    }

    /// Matching objects in key order (namespace, then name), as etcd lists them.
    pub fn list(
        &self,
        res: usize,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.objects
            .range(Key::of_type(res))
            .filter(|(k, _)| ns.is_none_or(|n| k.ns == n))
            .filter(|(k, _)| fields.single_name().is_none_or(|n| k.name == n))
            .filter(|(_, s)| labels.matches(&s.obj) && fields.matches(&s.obj))
            .map(|(_, s)| s.obj.clone())
            .collect()
    }

    /// Changes of type `res` after `rv`, or 410 when the history no longer reaches back that far.
    pub fn changes_since(&self, res: usize, rv: u64) -> ApiResult<Vec<Change>> {
        if self.is_compacted(rv) {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                self.compacted
            )));
        }
        let start = self.log.partition_point(|c| c.rv <= rv);
        Ok(self
            .log
            .iter()
            .skip(start)
            .filter(|c| c.res == res)
            .cloned()
            .collect())
    }

    /// Changes after `rv` are no longer all in the history.
    pub fn is_compacted(&self, rv: u64) -> bool {
        rv < self.compacted
    }

    /// Forgets the whole change history: watches from any earlier resourceVersion get 410.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted = self.rv;
    }

    fn record(&mut self, change: Change) {
        self.log.push_back(change);
        while self.log.len() > self.history {
            if let Some(c) = self.log.pop_front() {
                self.compacted = c.rv;
            }
        }
    }

    fn check_type(rt: &ResourceType, body: &Value) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if let Some(k) = body.get("kind").and_then(Value::as_str)
            && k != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({k}) does not match the resource ({})",
                rt.kind
            )));
        }
        if let Some(v) = body.get("apiVersion").and_then(Value::as_str)
            && v != rt.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                rt.api_version()
            )));
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------ create

    pub fn create(
        &mut self,
        res: usize,
        ns: &str,
        body: Value,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let rt = self.types[res].clone();
        Self::check_type(&rt, &body)?;
        let mut owners = Ownership::default();
        let obj = self.prepare_create(res, ns, body, ctx, Write::Create)?;
        owners.record_update(&ctx.who(Operation::Update), None, &obj, &now());
        self.insert_new(res, obj, owners, ctx)
    }

    /// Name, namespace and server metadata of a new object.
    fn prepare_create(
        &self,
        res: usize,
        ns: &str,
        mut obj: Value,
        ctx: &WriteCtx,
        how: Write,
    ) -> ApiResult<Value> {
        let rt = &self.types[res];
        if rt.namespaced {
            if let Some(n) = meta_str(&obj, "namespace")
                && n != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            if ns.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "{} is namespaced: create it under /namespaces/<ns>/",
                    rt.plural
                )));
            }
        }
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) => n.to_owned(),
            (None, Some(prefix)) => {
                let prefix = prefix.to_owned();
                let mut n = generated_name(&prefix);
                while self.objects.contains_key(&self.key(res, ns, &n)) {
                    n = generated_name(&prefix);
                }
                n
            }
            (None, None) => {
                return Err(ApiError::invalid(
                    rt,
                    "",
                    vec![crate::error::Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "name or generateName is required".into(),
                    }],
                ));
            }
        };
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        let has_spec = obj.get("spec").is_some();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if rt.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
        for server_owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
            "generation",
        ] {
            m.remove(server_owned);
        }
        if has_spec {
            m.insert("generation".into(), json!(1));
        }
        if rt.reset_status_on_create && !ctx.keep_status {
            obj["status"] = if rt.kind == "Service" {
                json!({"loadBalancer": {}})
            } else {
                json!({})
            };
        }
        self.admit(res, &mut obj, None, ctx, how)?;
        // What the writer owns is what is stored (a Secret's `data`, not its `stringData`).
        crate::strategy::prepare(rt, &mut obj);
        Ok(obj)
    }

    /// What the apiserver does to an object it is about to store: decode it as its type (unknown
    /// fields by `fieldValidation`), default it, allocate a Service's IP and ports, establish a
    /// CRD, run the storage admission plugins and strategies ([`crate::storage`]).
    fn admit(
        &self,
        res: usize,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &WriteCtx,
        how: Write,
    ) -> ApiResult<()> {
        let rt = &self.types[res];
        let name = meta_str(obj, "name").unwrap_or_default().to_owned();
        if let Some(fv) = ctx.validation {
            let unknown = schema::decode(rt, obj)?;
            if !unknown.is_empty() {
                match fv {
                    FieldValidation::Strict => {
                        return Err(schema::strict_error(rt, &name, &unknown, how));
                    }
                    FieldValidation::Warn => ctx
                        .warnings
                        .borrow_mut()
                        .extend(unknown.iter().map(|f| format!("unknown field \"{f}\""))),
                    FieldValidation::Ignore => {}
                }
            }
        }
        if rt.group.is_empty() && !crate::storage::quantities_decode(&rt.kind, obj) {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {e}",
                kind = rt.kind,
                v = rt.version,
                e = crate::quantity::FORMAT_ERROR
            )));
        }
        defaults::apply(rt, obj);
        match (rt.group.as_str(), rt.kind.as_str()) {
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                crd::default_names(obj);
                crd::establish(obj);
            }
            ("", "Service") => {
                let ns = meta_str(obj, "namespace").unwrap_or_default().to_owned();
                let objects = &self.objects;
                let mut taken = alloc::Taken::later(|| {
                    alloc::Held::of(
                        objects.range(Key::of_type(res)).map(|(_, s)| &s.obj),
                        (&ns, &name),
                    )
                });
                alloc::service(obj, old, &mut taken, self.service_cidr).map_err(|r| match r {
                    alloc::Refused::Invalid(causes) => ApiError::invalid(rt, &name, causes),
                    alloc::Refused::Internal(why) => ApiError::internal(why),
                })?;
            }
            ("", kind @ ("PersistentVolume" | "PersistentVolumeClaim")) => match old {
                None => {
                    let default_class = if kind == "PersistentVolumeClaim" {
                        self.types
                            .iter()
                            .position(|t| t.group == "storage.k8s.io" && t.kind == "StorageClass")
                            .and_then(|sc| {
                                crate::storage::default_class(
                                    self.objects
                                        .iter()
                                        .filter(|(k, _)| k.res == sc)
                                        .map(|(_, s)| &s.obj),
                                )
                            })
                    } else {
                        None
                    };
                    crate::storage::on_create(kind, obj, default_class, &now());
                }
                Some(old) => crate::storage::on_update(kind, obj, old, &now()),
            },
            _ => {}
        }
        if crate::csr::is_csr(rt) {
            crate::csr::prepare(obj, old, ctx.scope, ctx.user.as_ref());
            let problems = crate::csr::validate(obj, old, ctx.scope);
            if !problems.is_empty() {
                return Err(ApiError::invalid(rt, &name, problems));
            }
            if let Some(user) = &ctx.user {
                crate::csr::admit(self, rt, user, ctx.scope, obj, old)?;
            }
        }
        if let Some(user) = &ctx.user {
            crate::authz::escalation::admit(self, rt, user, obj, old, how)?;
            let ns = meta_str(obj, "namespace").unwrap_or_default();
            let attrs = crate::noderestriction::Attributes {
                op: if old.is_some() {
                    crate::noderestriction::Op::Update
                } else {
                    crate::noderestriction::Op::Create
                },
                group: &rt.group,
                resource: &rt.plural,
                subresource: ctx.scope.subresource(),
                namespace: ns,
                name: &name,
                object: Some(obj),
                old,
            };
            crate::noderestriction::admit(self, user, &attrs)?;
        }
        Ok(())
    }

    fn insert_new(
        &mut self,
        res: usize,
        mut obj: Value,
        owners: Ownership,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let rt = &self.types[res];
        let name = meta_str(&obj, "name").unwrap_or_default().to_owned();
        let ns = meta_str(&obj, "namespace").unwrap_or_default().to_owned();
        let key = self.key(res, &ns, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(rt, &name));
        }
        crate::strategy::prepare(rt, &mut obj);
        let problems = validate::check(rt, &obj, None, self.gates());
        if !problems.is_empty() {
            return Err(ApiError::invalid(rt, &name, problems));
        }
        let rv = self.rv + 1;
        let m = meta_mut(&mut obj);
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("managedFields".into(), owners.render(&rt.api_version()));
        if ctx.dry_run {
            return Ok(obj);
        }
        self.rv = rv;
        self.objects.insert(
            key,
            Stored {
                obj: obj.clone(),
                owners,
            },
        );
        self.record(Change {
            rv,
            res,
            ns,
            kind: ChangeKind::Added,
            object: obj.clone(),
            old: None,
        });
        self.after_write(res, &name);
        Ok(obj)
    }

    // ------------------------------------------------------------------------------ update

    /// PUT: the whole object, with optimistic concurrency when it carries a resourceVersion.
    pub fn update(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        body: Value,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let rt = self.types[res].clone();
        Self::check_type(&rt, &body)?;
        if let Some(n) = meta_str(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let key = self.key(res, ns, name);
        let stored = self
            .objects
            .get(&key)
            .ok_or_else(|| ApiError::not_found(&rt, name))?;
        Self::preconditions(&rt, name, &stored.obj, &body)?;
        self.finish_update(key, body, None, ctx, Write::Update)
    }

    /// A resourceVersion or UID in the request must be the stored one.
    fn preconditions(rt: &ResourceType, name: &str, stored: &Value, req: &Value) -> ApiResult<()> {
        if let Some(rv) = meta_str(req, "resourceVersion")
            && Some(rv) != meta_str(stored, "resourceVersion")
        {
            return Err(ApiError::modified(rt, name));
        }
        if let Some(uid) = meta_str(req, "uid")
            && Some(uid) != meta_str(stored, "uid")
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(stored, "uid").unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    /// PATCH in any of the four formats; an apply of an absent object creates it.
    #[allow(clippy::too_many_arguments)] // One per request parameter; a struct would only rename them.
    pub fn patch(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        kind: crate::log::PatchType,
        body: &Value,
        force: bool,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        use crate::log::PatchType;
        let rt = self.types[res].clone();
        let key = self.key(res, ns, name);
        let Some(stored) = self.objects.get(&key) else {
            if kind != PatchType::Apply {
                return Err(ApiError::not_found(&rt, name));
            }
            return self.apply_create(res, ns, name, body, force, ctx);
        };
        let mut candidate = stored.obj.clone();
        let mut owners = None;
        match kind {
            PatchType::Merge => patch::merge_patch(&mut candidate, body)?,
            PatchType::Json => patch::json_patch(&mut candidate, body)?,
            PatchType::Strategic => patch::strategic_merge_patch(&mut candidate, body, &rt.kind)?,
            PatchType::Apply => {
                Self::check_apply(&rt, name, body)?;
                let body = &Self::decode_apply(&rt, name, body, ctx)?;
                let (c, o) = stored
                    .owners
                    .apply_defaulted(
                        &ctx.who(Operation::Apply),
                        Some(&stored.obj),
                        body,
                        force,
                        &now(),
                        &|v| defaults::apply(&rt, v),
                    )
                    .map_err(|c| apply_conflict(&rt, name, &c))?;
                candidate = c;
                owners = Some(o);
            }
        }
        // A resourceVersion the patch sets is a precondition, as on the real server.
        Self::preconditions(&rt, name, &stored.obj, &candidate)?;
        self.finish_update(key, candidate, owners, ctx, Write::Patch)
    }

    fn check_apply(rt: &ResourceType, name: &str, body: &Value) -> ApiResult<()> {
        if body.get("apiVersion").is_none() || body.get("kind").is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply configuration",
            ));
        }
        Self::check_type(rt, body)?;
        if let Some(n) = meta_str(body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        Ok(())
    }

    /// An apply configuration without the fields its type lacks: they are neither applied nor
    /// owned (refused under `Strict`, as the real server's typed apply refuses them).
    fn decode_apply(
        rt: &ResourceType,
        name: &str,
        body: &Value,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let mut body = body.clone();
        if let Some(fv) = ctx.validation {
            let unknown = schema::decode(rt, &mut body)?;
            if !unknown.is_empty() {
                match fv {
                    FieldValidation::Strict => {
                        return Err(schema::strict_error(rt, name, &unknown, Write::Patch));
                    }
                    FieldValidation::Warn => ctx
                        .warnings
                        .borrow_mut()
                        .extend(unknown.iter().map(|f| format!("unknown field \"{f}\""))),
                    FieldValidation::Ignore => {}
                }
            }
        }
        Ok(body)
    }

    fn apply_create(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        body: &Value,
        force: bool,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let rt = self.types[res].clone();
        Self::check_apply(&rt, name, body)?;
        let body = &Self::decode_apply(&rt, name, body, ctx)?;
        if matches!(ctx.scope, Scope::Status | Scope::Approval) {
            return Err(ApiError::not_found(&rt, name));
        }
        let (mut candidate, owners) = Ownership::default()
            .apply(&ctx.who(Operation::Apply), None, body, force, &now())
            .map_err(|c| apply_conflict(&rt, name, &c))?;
        meta_mut(&mut candidate).insert("name".into(), json!(name));
        let obj = self.prepare_create(res, ns, candidate, ctx, Write::Patch)?;
        self.insert_new(res, obj, owners, ctx)
    }

    /// Scope masking, server metadata, no-op detection, validation, finalization, commit.
    fn finish_update(
        &mut self,
        key: Key,
        candidate: Value,
        owners: Option<Ownership>,
        ctx: &WriteCtx,
        how: Write,
    ) -> ApiResult<Value> {
        let rt = self.types[key.res].clone();
        let Some(stored) = self.objects.get(&key) else {
            return Err(ApiError::not_found(&rt, &key.name));
        };
        let old = stored.obj.clone();
        let mut new = match ctx.scope {
            Scope::Main if rt.status_subresource => {
                let mut c = candidate;
                set_or_remove(&mut c, "status", old.get("status"));
                c
            }
            Scope::Status | Scope::Approval => {
                let mut c = old.clone();
                set_or_remove(&mut c, "status", candidate.get("status"));
                c
            }
            _ => candidate,
        };
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = old["kind"].clone();
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let m = meta_mut(&mut new);
        for server_owned in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "selfLink",
        ] {
            match old_meta.get(server_owned) {
                Some(v) => {
                    m.insert(server_owned.into(), v.clone());
                }
                None => {
                    m.remove(server_owned);
                }
            }
        }
        m.remove("managedFields");
        self.admit(key.res, &mut new, Some(&old), ctx, how)?;
        if comparable(&new) == comparable(&old) {
            return Ok(old);
        }
        if spec_changed(&old, &new)
            && let Some(g) = new.pointer("/metadata/generation").and_then(Value::as_i64)
        {
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        crate::strategy::prepare(&rt, &mut new);
        let problems = validate::check(&rt, &new, Some(&old), self.gates());
        if !problems.is_empty() {
            return Err(ApiError::invalid(&rt, &key.name, problems));
        }
        // Validating admission, after validation as in kube-apiserver: PersistentVolumeClaimResize.
        if (rt.group.as_str(), rt.kind.as_str()) == ("", "PersistentVolumeClaim")
            && ctx.scope != Scope::Status
        {
            let class = |name: &str| {
                let sc = self.type_index("storage.k8s.io", "v1", "storageclasses")?;
                self.objects
                    .get(&self.key(sc, "", name))
                    .map(|s| s.obj.clone())
            };
            if let Some(why) = crate::storage::resize_admission(&new, &old, class) {
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!("{} \"{}\" is forbidden: {why}", rt.plural, key.name),
                )
                .about(&rt, &rt.plural, &key.name));
            }
        }
        // An apply brings the ownership it computed; any other write takes what it changed.
        let owners = owners.unwrap_or_else(|| {
            let mut o = stored.owners.clone();
            o.record_update(&ctx.who(Operation::Update), Some(&old), &new, &now());
            o
        });
        let rv = self.rv + 1;
        let m = meta_mut(&mut new);
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("managedFields".into(), owners.render(&rt.api_version()));
        if ctx.dry_run {
            return Ok(new);
        }
        self.rv = rv;
        if meta_str(&new, "deletionTimestamp").is_some() && finalizers_empty(&new) {
            // The last finalizer went: the deletion the client asked for earlier completes,
            // and the collector finds the dependents dangling.
            self.objects.remove(&key);
            self.record(Change {
                rv,
                res: key.res,
                ns: key.ns.clone(),
                kind: ChangeKind::Deleted,
                object: new.clone(),
                old: Some(old),
            });
            self.after_write(key.res, &key.name);
            let uid = meta_str(&new, "uid").unwrap_or_default().to_owned();
            self.collect_dependents(&key, &uid, &mut BTreeSet::new());
            return Ok(new);
        }
        self.objects.insert(
            key.clone(),
            Stored {
                obj: new.clone(),
                owners,
            },
        );
        self.record(Change {
            rv,
            res: key.res,
            ns: key.ns.clone(),
            kind: ChangeKind::Modified,
            object: new.clone(),
            old: Some(old),
        });
        self.after_write(key.res, &key.name);
        Ok(new)
    }

    // ------------------------------------------------------------------------------ delete

    /// Deletes now, or marks for deletion when finalizers remain, and does to the object's
    /// dependents what the garbage collector would for the request's `propagationPolicy`. `opts`
    /// is the `DeleteOptions` body (preconditions are honoured; grace periods are not modelled:
    /// nothing runs that would need them).
    pub fn delete(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        opts: &Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let rt = self.types[res].clone();
        let key = self.key(res, ns, name);
        let stored = self
            .objects
            .get(&key)
            .ok_or_else(|| ApiError::not_found(&rt, name))?;
        if let Some(p) = opts.get("preconditions") {
            let want = json!({"metadata": p});
            Self::preconditions(&rt, name, &stored.obj, &want)?;
        }
        let policy = propagation(opts)?;
        let uid = meta_str(&stored.obj, "uid").unwrap_or_default().to_owned();
        if dry_run {
            let mut obj = stored.obj.clone();
            if !finalizers_empty(&obj) || policy == Propagation::Foreground {
                let m = meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(now()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            return Ok(obj);
        }
        let mut seen = BTreeSet::new();
        match policy {
            Propagation::Orphan => {
                self.orphan_dependents(&key, &uid);
                self.delete_one(&key)
            }
            Propagation::Background => {
                let out = self.delete_one(&key)?;
                // An owner its finalizers keep still exists: the collector deletes its
                // dependents once it has gone (when the last finalizer goes), as upstream's
                // finds them dangling only then.
                if !self.objects.contains_key(&key) {
                    self.collect_dependents(&key, &uid, &mut seen);
                }
                Ok(out)
            }
            Propagation::Foreground => {
                // The owner shows it is waiting for its dependents, then goes when they have.
                let marked = self.mark_foreground(&key)?;
                self.collect_dependents(&key, &uid, &mut seen);
                let current = self
                    .objects
                    .get(&key)
                    .filter(|_| self.gc_may("patch", &key))
                    .map(|s| s.obj.clone());
                if let Some(current) = current {
                    let mut done = current;
                    if let Some(Value::Array(f)) = done.pointer_mut("/metadata/finalizers") {
                        f.retain(|x| x != FOREGROUND_FINALIZER);
                    }
                    self.finish_update(key, done, None, &gc_ctx(), Write::Update)?;
                }
                Ok(marked)
            }
        }
    }

    /// Removes the object, or marks it for deletion while it has finalizers.
    fn delete_one(&mut self, key: &Key) -> ApiResult<Value> {
        let rt = self.types[key.res].clone();
        let stored = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::not_found(&rt, &key.name))?;
        let old = stored.obj.clone();
        let mut obj = old.clone();
        let owners = stored.owners.clone();
        let rv = self.rv + 1;
        if !finalizers_empty(&obj) {
            if meta_str(&obj, "deletionTimestamp").is_some() {
                return Ok(obj);
            }
            let m = meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            self.rv = rv;
            self.objects.insert(
                key.clone(),
                Stored {
                    obj: obj.clone(),
                    owners,
                },
            );
            self.record(Change {
                rv,
                res: key.res,
                ns: key.ns.clone(),
                kind: ChangeKind::Modified,
                object: obj.clone(),
                old: Some(old),
            });
            return Ok(obj);
        }
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.rv = rv;
        self.objects.remove(key);
        self.record(Change {
            rv,
            res: key.res,
            ns: key.ns.clone(),
            kind: ChangeKind::Deleted,
            object: obj.clone(),
            old: None,
        });
        self.after_write(key.res, &key.name);
        Ok(obj)
    }

    /// Sets the deletion timestamp and the `foregroundDeletion` finalizer.
    fn mark_foreground(&mut self, key: &Key) -> ApiResult<Value> {
        let rt = self.types[key.res].clone();
        let stored = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::not_found(&rt, &key.name))?;
        let mut obj = stored.obj.clone();
        let m = meta_mut(&mut obj);
        if !m.contains_key("deletionTimestamp") {
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        let fins = m.entry("finalizers").or_insert_with(|| json!([]));
        if let Value::Array(f) = fins
            && !f.iter().any(|x| x == FOREGROUND_FINALIZER)
        {
            f.push(json!(FOREGROUND_FINALIZER));
        }
        // Through the update path: server-owned deletion fields are kept from the stored object
        // there, so they are written here directly.
        let old = stored.obj.clone();
        let owners = stored.owners.clone();
        if comparable(&obj) == comparable(&old) {
            return Ok(old);
        }
        let rv = self.rv + 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.rv = rv;
        self.objects.insert(
            key.clone(),
            Stored {
                obj: obj.clone(),
                owners,
            },
        );
        self.record(Change {
            rv,
            res: key.res,
            ns: key.ns.clone(),
            kind: ChangeKind::Modified,
            object: obj.clone(),
            old: Some(old),
        });
        Ok(obj)
    }

    /// The objects whose `ownerReferences` name `uid`: in the owner's namespace, or anywhere for a
    /// cluster-scoped owner.
    fn dependents(&self, owner: &Key, uid: &str) -> Vec<Key> {
        if uid.is_empty() {
            return Vec::new();
        }
        let owner_namespaced = self.types[owner.res].namespaced;
        self.objects
            .iter()
            .filter(|(k, _)| !owner_namespaced || k.ns == owner.ns)
            .filter(|(_, s)| {
                s.obj
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| {
                        refs.iter()
                            .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                    })
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether the garbage collector, as its ServiceAccount
    /// (`kube-system/generic-garbage-collector`, kube-controller-manager's
    /// `--use-service-account-credentials`), may `verb` the object at `key`; a refusal is logged
    /// with kube-apiserver's 403 text and leaves the object as it is, as the controller's failed
    /// request would.
    fn gc_may(&self, verb: &str, key: &Key) -> bool {
        let rt = &self.types[key.res];
        let info = crate::authz::RequestInfo {
            resource_request: true,
            verb: verb.to_owned(),
            api_group: rt.group.clone(),
            namespace: key.ns.clone(),
            resource: rt.plural.clone(),
            name: key.name.clone(),
            ..crate::authz::RequestInfo::default()
        };
        match crate::authz::authorize(self, &gc_user(), &info) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!("garbage collector: {}", e.message);
                false
            }
        }
    }

    /// The garbage collector's background cascade: dependents are deleted, theirs in turn.
    fn collect_dependents(&mut self, owner: &Key, uid: &str, seen: &mut BTreeSet<String>) {
        if !seen.insert(uid.to_owned()) {
            return;
        }
        for dep in self.dependents(owner, uid) {
            if !self.gc_may("delete", &dep) {
                continue;
            }
            let dep_uid = self
                .objects
                .get(&dep)
                .and_then(|s| meta_str(&s.obj, "uid"))
                .unwrap_or_default()
                .to_owned();
            if self.delete_one(&dep).is_ok() && !self.objects.contains_key(&dep) {
                self.collect_dependents(&dep, &dep_uid, seen);
            }
        }
    }

    /// The garbage collector's orphaning: dependents lose their reference to the owner.
    fn orphan_dependents(&mut self, owner: &Key, uid: &str) {
        for dep in self.dependents(owner, uid) {
            if !self.gc_may("patch", &dep) {
                continue;
            }
            let Some(mut obj) = self.objects.get(&dep).map(|s| s.obj.clone()) else {
                continue;
            };
            if let Some(Value::Array(refs)) = obj.pointer_mut("/metadata/ownerReferences") {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            }
            // An orphaned dependent that was fine stays fine; a failure leaves it as it was.
            let _ = self.finish_update(dep, obj, None, &gc_ctx(), Write::Update);
        }
    }

    /// Every object of the types the CRD `crd` served, removed (what its cleanup finalizer
    /// does once it is being deleted).
    fn delete_custom_resources(&mut self, crd: &str) {
        let served: Vec<usize> = self
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.custom.as_ref().is_some_and(|c| c.crd == crd))
            .map(|(i, _)| i)
            .collect();
        let victims: Vec<Key> = self
            .objects
            .keys()
            .filter(|k| served.contains(&k.res))
            .cloned()
            .collect();
        for k in victims {
            let Some(stored) = self.objects.remove(&k) else {
                continue;
            };
            let rv = self.rv + 1;
            self.rv = rv;
            let mut obj = stored.obj;
            meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
            self.record(Change {
                rv,
                res: k.res,
                ns: k.ns.clone(),
                kind: ChangeKind::Deleted,
                object: obj,
                old: None,
            });
        }
    }

    /// Keeps the served types in step with the stored CRDs.
    fn after_write(&mut self, res: usize, name: &str) {
        let t = &self.types[res];
        if (t.group.as_str(), t.kind.as_str())
            != ("apiextensions.k8s.io", "CustomResourceDefinition")
        {
            return;
        }
        for t in &mut self.types {
            if let Some(c) = t.custom.as_mut().filter(|c| c.crd == name) {
                c.served = false;
            }
        }
        let crd = self
            .objects
            .get(&self.key(res, "", name))
            .map(|s| s.obj.clone())
            .filter(|o| meta_str(o, "deletionTimestamp").is_none());
        let Some(crd) = crd else {
            self.delete_custom_resources(name);
            return;
        };
        for new in crd::served_types(&crd) {
            let slot = self.types.iter().position(|t| {
                t.custom.is_some()
                    && t.group == new.group
                    && t.version == new.version
                    && t.plural == new.plural
            });
            match slot {
                Some(i) => self.types[i] = new,
                None => self.types.push(new),
            }
        }
    }
}

/// Who the garbage collector is.
fn gc_user() -> crate::authz::User {
    crate::authz::User::service_account("kube-system", "generic-garbage-collector")
}

/// The garbage collector's writes.
fn gc_ctx() -> WriteCtx {
    WriteCtx {
        manager: "kube-controller-manager".into(),
        scope: Scope::Everything,
        dry_run: false,
        keep_status: true,
        validation: None,
        warnings: RefCell::default(),
        user: None,
    }
}

/// `propagationPolicy` (or the older `orphanDependents`) of `DeleteOptions`; `Background` when
/// neither is given, the default of every type served here.
fn propagation(opts: &Value) -> ApiResult<Propagation> {
    match opts.get("propagationPolicy").and_then(Value::as_str) {
        Some("Orphan") => Ok(Propagation::Orphan),
        Some("Background") => Ok(Propagation::Background),
        Some("Foreground") => Ok(Propagation::Foreground),
        Some(other) => Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            ),
        )),
        None => match opts.get("orphanDependents").and_then(Value::as_bool) {
            Some(true) => Ok(Propagation::Orphan),
            _ => Ok(Propagation::Background),
        },
    }
}

fn set_or_remove(obj: &mut Value, field: &str, value: Option<&Value>) {
    if let Value::Object(m) = obj {
        match value {
            Some(v) => {
                m.insert(field.into(), v.clone());
            }
            None => {
                m.remove(field);
            }
        }
    }
}

fn apply_conflict(
    rt: &ResourceType,
    name: &str,
    conflicts: &[crate::fields::Conflict],
) -> ApiError {
    let n = conflicts.len();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|c| format!("conflict with \"{}\": {}", c.manager, c.field_string()))
        .collect();
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            lines.join("\n")
        ),
    )
    .about(rt, &rt.plural, name)
    .with_causes(
        conflicts
            .iter()
            .map(|c| crate::error::Cause {
                reason: "FieldManagerConflict",
                field: c.field_string(),
                message: format!("conflict with \"{}\"", c.manager),
            })
            .collect(),
    )
}

// ------------------------------------------------------------------------------ snapshots

impl Store {
    /// Every stored object with its type's index, for a snapshot (see `crate::snapshot`).
    pub(crate) fn export(&self) -> Vec<(usize, Value)> {
        self.objects
            .iter()
            .map(|(k, s)| (k.res, s.obj.clone()))
            .collect()
    }

    /// Puts objects of a snapshot back as they were stored (identity, resourceVersion and field
    /// ownership kept), and the resourceVersion counter where it was; CustomResourceDefinitions
    /// first, so that the types they serve exist for their objects. The history starts empty:
    /// watches from before the snapshot relist, as after etcd compaction. An object of a type that
    /// is not served is returned by its `group/version plural`.
    pub(crate) fn import(
        &mut self,
        rv: u64,
        mut objects: Vec<(String, String, String, Value)>,
    ) -> Result<(), String> {
        let is_crd =
            |g: &str, p: &str| g == "apiextensions.k8s.io" && p == "customresourcedefinitions";
        objects.sort_by_key(|(g, _, p, _)| !is_crd(g, p));
        for (group, version, plural, obj) in objects {
            let res = self
                .type_index(&group, &version, &plural)
                .ok_or_else(|| format!("{group}/{version} {plural}"))?;
            let ns = meta_str(&obj, "namespace").unwrap_or_default().to_owned();
            let name = meta_str(&obj, "name").unwrap_or_default().to_owned();
            let owners = Ownership::from_managed_fields(
                obj.pointer("/metadata/managedFields")
                    .unwrap_or(&Value::Null),
            );
            let key = self.key(res, &ns, &name);
            self.objects.insert(key, Stored { obj, owners });
            self.after_write(res, &name);
        }
        self.rv = self.rv.max(rv);
        self.compacted = self.rv;
        Ok(())
    }
}
