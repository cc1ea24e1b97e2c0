//! Requests of in-process components as their own users: what a kubelet, a controller or
//! kubeadm running inside a simulation asks, authorised (Node, RBAC) and admitted
//! (NodeRestriction and the store's admission) as kube-apiserver would, without the
//! authentication step (the caller is the user, as a component holding its credential is).
//!
//! [`FakeKube::acting_as`] is the synchronous form for callers that hold their own locks;
//! [`FakeKube::user_client`] a kube-rs client of the same user over [`FakeKube::url`] (a static
//! token, as kube-apiserver's `--token-auth-file` gives). Both are logged as requests, with the
//! user, and answered 403 as the real server answers.

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::authz::User;
use crate::error::ApiError;
use crate::log::{Request, Verb};
use crate::schema::FieldValidation;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Scope, WriteCtx};
use crate::{FakeError, FakeKube, from_json, to_json};

/// A fake, acting as one user ([`FakeKube::acting_as`]).
#[derive(Clone)]
pub struct Acting<'a> {
    fake: &'a FakeKube,
    user: User,
    manager: String,
}

impl std::fmt::Debug for Acting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acting")
            .field("user", &self.user.name)
            .field("manager", &self.manager)
            .finish()
    }
}

impl FakeKube {
    /// In-process requests as `user`, their writes owned by the field manager `manager` (the
    /// kubelet's is `kubelet`).
    pub fn acting_as(&self, user: User, manager: &str) -> Acting<'_> {
        Acting {
            fake: self,
            user,
            manager: manager.to_owned(),
        }
    }

    /// A bearer token that authenticates as `user` on [`FakeKube::url`] and the TLS fronts.
    pub fn user_token(&self, user: &User) -> String {
        self.shared.tokens().static_token(user)
    }

    /// A kube-rs client of [`FakeKube::url`] authenticated as `user`.
    ///
    /// # Errors
    /// [`FakeError::Uri`] or [`FakeError::Client`].
    pub fn user_client(&self, user: &User) -> Result<kube::Client, FakeError> {
        self.token_client(self.user_token(user), None)
    }
}

/// Where a request goes, as its URL says it.
struct Target {
    res: usize,
    ns: String,
    name: String,
    path: String,
}

impl Acting<'_> {
    /// The user acting.
    pub fn user(&self) -> &User {
        &self.user
    }

    fn target<K: Resource<DynamicType = ()>>(
        &self,
        ns: Option<&str>,
        name: &str,
        sub: &str,
    ) -> Result<Target, FakeError> {
        let res = self.fake.index_of::<K>()?;
        Ok(Self::target_in(
            res,
            &K::group(&()),
            &K::version(&()),
            &K::plural(&()),
            ns,
            name,
            sub,
        ))
    }

    /// The target of an object of the type at `res`, by its URL's parts.
    fn target_in(
        res: usize,
        group: &str,
        version: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
        sub: &str,
    ) -> Target {
        let mut path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let ns = ns.unwrap_or_default();
        if !ns.is_empty() {
            path.push_str(&format!("/namespaces/{ns}"));
        }
        path.push_str(&format!("/{plural}"));
        if !name.is_empty() {
            path.push_str(&format!("/{name}"));
        }
        if !sub.is_empty() {
            path.push_str(&format!("/{sub}"));
        }
        Target {
            res,
            ns: ns.to_owned(),
            name: name.to_owned(),
            path,
        }
    }

    /// Authorises the request (a denial is logged by the server's authorizer).
    fn authorize(&self, method: &str, t: &Target, query: &str) -> Result<(), FakeError> {
        let uri: http::Uri = if query.is_empty() {
            t.path.parse()
        } else {
            format!("{}?{query}", t.path).parse()
        }
        .map_err(|e: http::uri::InvalidUri| FakeError::Uri(e.to_string()))?;
        let method: http::Method = method
            .parse()
            .map_err(|_| FakeError::Uri(format!("method {method}")))?;
        self.fake.shared.authorize(&self.user, &method, &uri)?;
        Ok(())
    }

    fn log(&self, method: &str, t: &Target, query: &str, status: u16) {
        let info = crate::authz::RequestInfo::parse(method, &t.path, query);
        let mut store = self.fake.shared.store();
        let seq = store.next_seq;
        store.next_seq += 1;
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        store.requests.push(Request {
            seq,
            method: method.to_owned(),
            path: t.path.clone(),
            query: query.to_owned(),
            verb: Verb::of(&info.verb),
            resource: opt(&info.resource),
            group: Some(info.api_group.clone()),
            namespace: opt(&info.namespace),
            name: opt(&info.name),
            subresource: opt(&info.subresource),
            patch: None,
            field_manager: Some(self.manager.clone()),
            user: Some(self.user.name.clone()),
            status,
        });
    }

    fn finish<T>(
        &self,
        method: &str,
        t: &Target,
        query: &str,
        out: Result<T, ApiError>,
    ) -> Result<T, FakeError> {
        self.finish_as(method, t, query, out, method == "POST")
    }

    /// [`Acting::finish`] of a request that `created` (201) when it succeeded.
    fn finish_as<T>(
        &self,
        method: &str,
        t: &Target,
        query: &str,
        out: Result<T, ApiError>,
        created: bool,
    ) -> Result<T, FakeError> {
        let status = match &out {
            Ok(_) if created => 201,
            Ok(_) => 200,
            Err(e) => e.code,
        };
        self.log(method, t, query, status);
        if out.is_ok() && method != "GET" {
            self.fake.shared.notify();
        }
        out.map_err(FakeError::from)
    }

    fn ctx(&self, scope: Scope) -> WriteCtx {
        WriteCtx {
            manager: self.manager.clone(),
            scope,
            dry_run: false,
            keep_status: false,
            validation: Some(FieldValidation::Strict),
            warnings: Default::default(),
            user: Some(self.user.clone()),
        }
    }

    /// GET of one object; `None` when it does not exist (a 404).
    pub fn get<K>(&self, ns: Option<&str>, name: &str) -> Result<Option<K>, FakeError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let t = self.target::<K>(ns, name, "")?;
        self.authorize("GET", &t, "")?;
        let got = self.fake.shared.store().get(t.res, &t.ns, &t.name);
        match self.finish("GET", &t, "", got) {
            Ok(v) => from_json(v, &K::kind(&())).map(Some),
            Err(FakeError::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A list in `ns` (`None`: all namespaces) with a field selector (`""`: none), as a
    /// reflector's first list.
    pub fn list<K>(&self, ns: Option<&str>, field_selector: &str) -> Result<Vec<K>, FakeError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let t = self.target::<K>(ns, "", "")?;
        let query = if field_selector.is_empty() {
            String::new()
        } else {
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("fieldSelector", field_selector)
                .finish()
        };
        self.authorize("GET", &t, &query)?;
        let fields = FieldSelector::parse(field_selector)?;
        let items = self.fake.shared.store().list(
            t.res,
            ns.filter(|n| !n.is_empty()),
            &LabelSelector::default(),
            &fields,
        );
        let items = self.finish("GET", &t, &query, Ok(items))?;
        items
            .into_iter()
            .map(|v| from_json(v, &K::kind(&())))
            .collect()
    }

    /// POST of a new object (its `status` is cleared where the server clears it).
    pub fn create<K>(&self, obj: &K) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let ns = obj.meta().namespace.clone();
        let t = self.target::<K>(ns.as_deref(), "", "")?;
        self.authorize("POST", &t, "")?;
        let v = to_json(obj, &K::kind(&()))?;
        let ctx = self.ctx(Scope::Main);
        let created = self
            .fake
            .shared
            .write(None, |s| s.create(t.res, &t.ns, v, &ctx));
        from_json(self.finish("POST", &t, "", created)?, &K::kind(&()))
    }

    /// PUT of the object as `change` leaves it (its main resource, or `status` with
    /// `status: true`): a client's read-modify-write, as one request (the read is not logged).
    pub fn update<K>(
        &self,
        ns: Option<&str>,
        name: &str,
        status: bool,
        change: impl FnOnce(&mut K),
    ) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let sub = if status { "status" } else { "" };
        self.update_subresource(ns, name, sub, change)
    }

    /// PUT through a subresource: `""` (the object), `status`, or a CertificateSigningRequest's
    /// `approval`.
    pub fn update_subresource<K>(
        &self,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        change: impl FnOnce(&mut K),
    ) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let scope = match sub {
            "" => Scope::Main,
            "status" => Scope::Status,
            "approval" => Scope::Approval,
            other => return Err(FakeError::Uri(format!("subresource {other}"))),
        };
        let t = self.target::<K>(ns, name, sub)?;
        self.authorize("PUT", &t, "")?;
        let stored = self.fake.shared.store().get(t.res, &t.ns, &t.name);
        let stored = match stored {
            Ok(v) => v,
            Err(e) => return self.finish("PUT", &t, "", Err(e)),
        };
        let mut obj: K = from_json(stored, &K::kind(&()))?;
        change(&mut obj);
        let v = to_json(&obj, &K::kind(&()))?;
        let ctx = self.ctx(scope);
        let updated = self
            .fake
            .shared
            .write(None, |s| s.update(t.res, &t.ns, &t.name, v, &ctx));
        from_json(self.finish("PUT", &t, "", updated)?, &K::kind(&()))
    }

    /// PATCH of the object (`sub` `""`) or of its `status`, with a JSON merge patch or a
    /// strategic merge patch (`strategic`), as kubectl and client-go's `Patch` send them.
    pub fn patch<K>(
        &self,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        strategic: bool,
        body: &Value,
    ) -> Result<K, FakeError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let scope = match sub {
            "" => Scope::Main,
            "status" => Scope::Status,
            other => return Err(FakeError::Uri(format!("subresource {other}"))),
        };
        let t = self.target::<K>(ns, name, sub)?;
        self.authorize("PATCH", &t, "")?;
        let kind = if strategic {
            crate::log::PatchType::Strategic
        } else {
            crate::log::PatchType::Merge
        };
        let ctx = self.ctx(scope);
        let patched = self.fake.shared.write(None, |s| {
            s.patch(t.res, &t.ns, &t.name, kind, body, false, &ctx)
        });
        from_json(self.finish("PATCH", &t, "", patched)?, &K::kind(&()))
    }

    /// A server-side apply of an object given as JSON (`apiVersion`, `kind`, `metadata.name`, and
    /// `metadata.namespace` for namespaced types), forced as `kubectl apply --server-side
    /// --force-conflicts` sends it: created when absent, else the fields of this manager merged.
    /// Authorised as a `patch` of the object and admitted as any write of this user. A type the
    /// fake does not serve is [`FakeError::UnknownKind`] (kubectl's `no matches for kind`).
    pub fn apply_json(&self, obj: &Value) -> Result<Value, FakeError> {
        let s = |field: &str| obj.get(field).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (s("apiVersion"), s("kind"));
        let meta = |field: &str| {
            obj.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (name, ns) = (meta("name"), meta("namespace"));
        let t = {
            let store = self.fake.shared.store();
            let res =
                store
                    .type_of_kind(api_version, kind)
                    .ok_or_else(|| FakeError::UnknownKind {
                        api_version: api_version.to_owned(),
                        kind: kind.to_owned(),
                    })?;
            let rt = &store.types[res];
            let ns = (rt.namespaced && !ns.is_empty()).then_some(ns.as_str());
            Self::target_in(res, &rt.group, &rt.version, &rt.plural, ns, &name, "")
        };
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("fieldManager", &self.manager)
            .append_pair("force", "true")
            .finish();
        self.authorize("PATCH", &t, &query)?;
        let ctx = self.ctx(Scope::Main);
        let mut created = false;
        let applied = self.fake.shared.write(None, |s| {
            created = s.get(t.res, &t.ns, &t.name).is_err();
            s.patch(
                t.res,
                &t.ns,
                &t.name,
                crate::log::PatchType::Apply,
                obj,
                true,
                &ctx,
            )
        });
        self.finish_as("PATCH", &t, &query, applied, created)
    }

    /// A SubjectAccessReview (`authorization.k8s.io/v1`), created as this user: whether
    /// `subject` may `verb` the `resource` (`plural` or `plural/subresource`) of `group`, named
    /// `name` in `ns` (`""` for none), as the server's authorizers answer it. Creating the review
    /// needs its own permission (`create` of `subjectaccessreviews`).
    pub fn review_access(
        &self,
        subject: &User,
        verb: &str,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> Result<bool, FakeError> {
        let t = Target {
            res: usize::MAX,
            ns: String::new(),
            name: String::new(),
            path: "/apis/authorization.k8s.io/v1/subjectaccessreviews".into(),
        };
        self.authorize("POST", &t, "")?;
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let info = crate::authz::RequestInfo {
            resource_request: true,
            verb: verb.to_owned(),
            api_group: group.to_owned(),
            namespace: ns.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            name: name.to_owned(),
            ..crate::authz::RequestInfo::default()
        };
        let allowed = crate::authz::authorize(&self.fake.shared.store(), subject, &info).is_ok();
        self.log("POST", &t, "", 201);
        Ok(allowed)
    }

    /// DELETE of one object (finalizers are honoured).
    pub fn delete<K>(&self, ns: Option<&str>, name: &str) -> Result<(), FakeError>
    where
        K: Resource<DynamicType = ()>,
    {
        let t = self.target::<K>(ns, name, "")?;
        self.authorize("DELETE", &t, "")?;
        let out = crate::server::admit_node(
            &self.fake.shared,
            Some(&self.user),
            t.res,
            &t.ns,
            &t.name,
            "",
            None,
        )
        .and_then(|()| {
            self.fake.shared.write(None, |s| {
                s.delete(t.res, &t.ns, &t.name, &Value::Null, false)
            })
        });
        self.finish("DELETE", &t, "", out).map(|_| ())
    }
}
