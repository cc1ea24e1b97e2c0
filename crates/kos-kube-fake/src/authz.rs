//! Authorisation as kube-apiserver does it with kubeadm's `--authorization-mode=Node,RBAC`:
//! a request becomes attributes as `RequestInfoFactory` reads a URL (verb, API group, resource,
//! subresource, name, namespace, the field selector; a non-resource path otherwise), members of
//! `system:masters` are allowed (the apiserver's privileged-group authorizer), then the Node
//! authorizer decides for kubelets (module `nodeauth`; its reason ends the 403 it leaves to RBAC,
//! `... : no relationship found between node 'n1' and this object`), then the RBAC authorizer's
//! rules decide:
//! ClusterRoleBindings to ClusterRoles, RoleBindings to a Role or a ClusterRole in their namespace,
//! subjects by User, Group and ServiceAccount, rules with `*` verbs, groups and resources,
//! `resource/subresource` and `*/subresource`, resourceNames (a request without a name, a create
//! or a list without a `metadata.name` field selector, never matches them), and non-resource URLs
//! with a trailing `*`. A denial is the apiserver's 403 (`ForbiddenStatusError`).
//!
//! The ClusterRole aggregation controller is modelled in [`aggregate`]: an aggregated
//! ClusterRole's `rules` are the union of the rules of the ClusterRoles its
//! `aggregationRule.clusterRoleSelectors` select, rewritten after every write.
//!
//! What a kubelet may then write is narrowed by the NodeRestriction admission plugin (module
//! `noderestriction`, run with the store's admission).
//!
//! The rbac storage's escalation prevention on writes of roles and bindings (a user grants only
//! what it holds, unless it may `escalate` the role or `bind` the one a binding refers to) is in
//! [`escalation`], run with the store's admission for every write that has a user.
//!
//! Not modelled: webhooks, ABAC, and the `create` check kube-apiserver adds to WebSocket upgrades
//! of `pods/portforward`.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde_json::Value;

use crate::error::{ApiError, Details};
use crate::selectors::LabelSelector;
use crate::store::{Scope, Store, WriteCtx};

/// The group whose members every authorizer chain of kube-apiserver allows.
pub const MASTERS: &str = "system:masters";
pub const AUTHENTICATED: &str = "system:authenticated";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const ANONYMOUS: &str = "system:anonymous";
const SA_PREFIX: &str = "system:serviceaccount:";

/// Who makes a request, as kube-apiserver's authenticators say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// An authenticated user: its groups and `system:authenticated`.
    pub fn authenticated(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = String>,
    ) -> User {
        let mut groups: Vec<String> = groups.into_iter().collect();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        User {
            name: name.into(),
            groups,
        }
    }

    pub fn anonymous() -> User {
        User {
            name: ANONYMOUS.to_owned(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// A kubelet's client certificate: `system:node:<name>` in `system:nodes`, the identity the
    /// Node authorizer and NodeRestriction recognise.
    pub fn node(name: &str) -> User {
        User::authenticated(format!("system:node:{name}"), ["system:nodes".to_owned()])
    }

    /// What the ServiceAccount token authenticator makes of a token of `ns/name`.
    pub fn service_account(ns: &str, name: &str) -> User {
        User::authenticated(
            format!("{SA_PREFIX}{ns}:{name}"),
            [
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{ns}"),
            ],
        )
    }

    /// The apiserver's own loopback client (`system:apiserver` in `system:masters`).
    pub fn loopback() -> User {
        User::authenticated("system:apiserver", [MASTERS.to_owned()])
    }
}

/// What a request asks, as `RequestInfoFactory.NewRequestInfo` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub resource_request: bool,
    pub path: String,
    /// `get`, `list`, `watch`, `create`, … for resources; the lower-case HTTP method otherwise.
    pub verb: String,
    pub api_group: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The `fieldSelector` of a list or watch, as `GetFieldSelector` parses it for the
    /// authorizers that look at it (the Node authorizer's `spec.nodeName`).
    pub field_selector: Vec<FieldRequirement>,
}

/// One term of a field selector: `field=value`, `field==value` (equals) or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub equals: bool,
    pub value: String,
}

impl FieldRequirement {
    fn parse_all(sel: &str) -> Vec<FieldRequirement> {
        sel.split(',')
            .filter_map(|t| {
                let t = t.trim();
                let (field, equals, value) = if let Some((f, v)) = t.split_once("!=") {
                    (f, false, v)
                } else if let Some((f, v)) = t.split_once("==") {
                    (f, true, v)
                } else {
                    let (f, v) = t.split_once('=')?;
                    (f, true, v)
                };
                Some(FieldRequirement {
                    field: field.trim().to_owned(),
                    equals,
                    value: value.trim().to_owned(),
                })
            })
            .collect()
    }
}

impl RequestInfo {
    /// `query` is the raw query string (for `watch` and a `metadata.name` field selector).
    pub fn parse(method: &str, path: &str, query: &str) -> RequestInfo {
        let mut info = RequestInfo {
            resource_request: false,
            path: path.to_owned(),
            verb: method.to_ascii_lowercase(),
            ..RequestInfo::default()
        };
        let parts: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|_| !path.trim_matches('/').is_empty())
            .collect();
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return info;
        }
        let mut rest = &parts[1..];
        if parts[0] == "apis" {
            if rest.len() < 3 {
                return info;
            }
            info.api_group = rest[0].to_owned();
            rest = &rest[1..];
        }
        info.resource_request = true;
        rest = &rest[1..]; // the version
        let special = matches!(rest.first(), Some(&"watch" | &"proxy"));
        if special {
            if rest.len() < 2 {
                return info;
            }
            info.verb = rest[0].to_owned();
            rest = &rest[1..];
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_owned();
        }
        // `/namespaces/{ns}/{resource}/…`; `status` and `finalize` are a Namespace's own.
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            info.namespace = rest[1].to_owned();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let no_sub = info.verb == "proxy";
        if rest.len() >= 3 && !no_sub {
            info.subresource = rest[2].to_owned();
        }
        if rest.len() >= 2 {
            info.name = rest[1].to_owned();
        }
        if let Some(r) = rest.first() {
            info.resource = (*r).to_owned();
        }
        let q: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let first = |k: &str| q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        if info.name.is_empty() && info.verb == "get" {
            info.verb = match first("watch").map(str::to_ascii_lowercase).as_deref() {
                None | Some("false" | "0") => "list",
                Some(_) => "watch",
            }
            .to_owned();
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_owned();
        }
        if let Some(sel) = first("fieldSelector") {
            info.field_selector = FieldRequirement::parse_all(sel);
        }
        // A list or watch of one object by `metadata.name=` is that object's, for resourceNames.
        if info.name.is_empty()
            && matches!(info.verb.as_str(), "list" | "watch")
            && let Some(sel) = first("fieldSelector")
        {
            let names: Vec<&str> = sel
                .split(',')
                .filter_map(|t| {
                    let t = t.trim();
                    t.strip_prefix("metadata.name==")
                        .or_else(|| t.strip_prefix("metadata.name="))
                })
                .collect();
            if let [one] = names.as_slice() {
                info.name = (*one).to_owned();
            }
        }
        info
    }
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

/// `rbac.RuleAllows` with the helpers of `pkg/apis/rbac/v1/evaluation_helpers.go`.
pub fn rule_allows(info: &RequestInfo, rule: &PolicyRule) -> bool {
    let verb = rule.verbs.iter().any(|v| v == "*" || *v == info.verb);
    if !info.resource_request {
        return verb
            && list(&rule.non_resource_urls).iter().any(|u| {
                u == "*"
                    || *u == info.path
                    || (u.ends_with('*') && info.path.starts_with(u.trim_end_matches('*')))
            });
    }
    let combined = if info.subresource.is_empty() {
        info.resource.clone()
    } else {
        format!("{}/{}", info.resource, info.subresource)
    };
    let group = list(&rule.api_groups)
        .iter()
        .any(|g| g == "*" || *g == info.api_group);
    let resource = list(&rule.resources).iter().any(|r| {
        r == "*"
            || *r == combined
            || (!info.subresource.is_empty()
                && r.len() == info.subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(&info.subresource))
    });
    let names = list(&rule.resource_names);
    let name = names.is_empty() || names.contains(&info.name);
    verb && group && resource && name
}

fn applies_to(subject: &Subject, user: &User, binding_ns: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.name == format!("{SA_PREFIX}{ns}:{}", subject.name)
        }
        _ => false,
    }
}

fn typed<K: serde::de::DeserializeOwned>(v: Value) -> Option<K> {
    serde_json::from_value(v).ok()
}

fn all<K: serde::de::DeserializeOwned>(store: &Store, plural: &str, ns: Option<&str>) -> Vec<K> {
    let Some(res) = store.type_index("rbac.authorization.k8s.io", "v1", plural) else {
        return Vec::new();
    };
    store
        .list(res, ns, &Default::default(), &Default::default())
        .into_iter()
        .filter_map(typed)
        .collect()
}

fn one<K: serde::de::DeserializeOwned>(
    store: &Store,
    plural: &str,
    ns: &str,
    name: &str,
) -> Option<K> {
    let res = store.type_index("rbac.authorization.k8s.io", "v1", plural)?;
    store.get(res, ns, name).ok().and_then(typed)
}

/// The rules of the role a binding refers to (none when it does not exist, as in RBAC).
fn role_rules(store: &Store, kind: &str, binding_ns: &str, name: &str) -> Vec<PolicyRule> {
    match kind {
        "ClusterRole" => one::<ClusterRole>(store, "clusterroles", "", name)
            .and_then(|r| r.rules)
            .unwrap_or_default(),
        "Role" if !binding_ns.is_empty() => one::<Role>(store, "roles", binding_ns, name)
            .and_then(|r| r.rules)
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The decision of the chain kubeadm configures: `system:masters` (the privileged-group
/// authorizer kube-apiserver puts first), then `Node`, then `RBAC`. `Ok` is allowed, with the
/// reason; a denial carries the authorizers' reasons as the apiserver's 403 does.
pub fn authorize(store: &Store, user: &User, info: &RequestInfo) -> Result<String, ApiError> {
    if user.groups.iter().any(|g| g == MASTERS) {
        return Ok(format!("member of {MASTERS}"));
    }
    let node_reason = match crate::nodeauth::authorize(store, user, info) {
        crate::nodeauth::Decision::Allow => return Ok("allowed by the Node authorizer".into()),
        crate::nodeauth::Decision::NoOpinion(why) => why,
    };
    if let Some(why) = rbac(store, user, info) {
        return Ok(why);
    }
    Err(forbidden_because(user, info, &node_reason))
}

/// The RBAC objects as the authorizer reads them, parsed once per write to a role or binding
/// ([`Store::rbac_view`]) instead of on every request: each binding in the store's order (by
/// namespace, then name) with the rules of the role it refers to at that time (none when that role
/// does not exist, as in RBAC).
#[derive(Debug, Default)]
pub struct RbacView {
    cluster: Vec<(ClusterRoleBinding, Vec<PolicyRule>)>,
    namespaced: std::collections::BTreeMap<String, Vec<(RoleBinding, Vec<PolicyRule>)>>,
}

impl RbacView {
    pub(crate) fn build(store: &Store) -> RbacView {
        let cluster = all::<ClusterRoleBinding>(store, "clusterrolebindings", None)
            .into_iter()
            .filter(|b| b.role_ref.kind == "ClusterRole")
            .map(|b| {
                let rules = role_rules(store, "ClusterRole", "", &b.role_ref.name);
                (b, rules)
            })
            .collect();
        let mut namespaced: std::collections::BTreeMap<String, Vec<_>> = Default::default();
        for b in all::<RoleBinding>(store, "rolebindings", None) {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let rules = role_rules(store, &b.role_ref.kind, &ns, &b.role_ref.name);
            namespaced.entry(ns).or_default().push((b, rules));
        }
        RbacView {
            cluster,
            namespaced,
        }
    }
}

/// The RBAC authorizer: why it allows, or `None`.
fn rbac(store: &Store, user: &User, info: &RequestInfo) -> Option<String> {
    let view = store.rbac_view();
    for (b, rules) in &view.cluster {
        let subjects = b.subjects.as_deref().unwrap_or_default();
        if !subjects.iter().any(|s| applies_to(s, user, "")) {
            continue;
        }
        if rules.iter().any(|r| rule_allows(info, r)) {
            return Some(format!(
                "RBAC: allowed by ClusterRoleBinding \"{}\" of ClusterRole \"{}\"",
                b.metadata.name.as_deref().unwrap_or_default(),
                b.role_ref.name
            ));
        }
    }
    if info.namespace.is_empty() {
        return None;
    }
    for (b, rules) in view.namespaced.get(&info.namespace).into_iter().flatten() {
        let subjects = b.subjects.as_deref().unwrap_or_default();
        if !subjects
            .iter()
            .any(|s| applies_to(s, user, &info.namespace))
        {
            continue;
        }
        if rules.iter().any(|r| rule_allows(info, r)) {
            return Some(format!(
                "RBAC: allowed by RoleBinding \"{}/{}\" of {} \"{}\"",
                info.namespace,
                b.metadata.name.as_deref().unwrap_or_default(),
                b.role_ref.kind,
                b.role_ref.name
            ));
        }
    }
    None
}

/// `responsewriters.ForbiddenStatusError`: `errors.NewForbidden` of the group-resource and name,
/// with `forbiddenMessage` and the authorizers' reason (when there is one) as the reason.
pub fn forbidden_because(user: &User, info: &RequestInfo, reason: &str) -> ApiError {
    let who = &user.name;
    let because = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    if !info.resource_request {
        return ApiError::new(
            403,
            "Forbidden",
            format!(
                "forbidden: User \"{who}\" cannot {} path \"{}\"{because}",
                info.verb, info.path
            ),
        );
    }
    let resource = if info.subresource.is_empty() {
        info.resource.clone()
    } else {
        format!("{}/{}", info.resource, info.subresource)
    };
    let scope = if info.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{}\"", info.namespace)
    };
    let why = format!(
        "User \"{who}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        info.verb, info.api_group
    );
    let qualified = if info.api_group.is_empty() {
        info.resource.clone()
    } else {
        format!("{}.{}", info.resource, info.api_group)
    };
    let what = if info.name.is_empty() {
        format!("{qualified} is forbidden")
    } else {
        format!("{qualified} \"{}\" is forbidden", info.name)
    };
    let mut e = ApiError::new(403, "Forbidden", format!("{what}: {why}{because}"));
    e.details = Some(Box::new(Details {
        name: (!info.name.is_empty()).then(|| info.name.clone()),
        group: (!info.api_group.is_empty()).then(|| info.api_group.clone()),
        kind: Some(info.resource.clone()),
        causes: Vec::new(),
    }));
    e
}

/// A `metav1.LabelSelector` as the selector string the store matches with.
fn selector_of(sel: &Value) -> Option<LabelSelector> {
    let mut terms = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            terms.push(format!("{k}={}", v.as_str()?));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key")?.as_str()?;
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match e.get("operator")?.as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    LabelSelector::parse(&terms.join(",")).ok()
}

/// The ClusterRole aggregation controller's pass: each aggregated ClusterRole gets the rules of
/// the ClusterRoles its selectors match (by name, each rule once). Returns whether it wrote.
/// Like the real controller, it looks only after a ClusterRole changed: a pass that found
/// nothing to do is not repeated until the next ClusterRole write (one that wrote is, as its
/// own writes may feed another aggregated role).
pub(crate) fn aggregate(store: &mut Store) -> bool {
    let Some(res) = store.type_index("rbac.authorization.k8s.io", "v1", "clusterroles") else {
        return false;
    };
    let writes = store.writes_of(res);
    if store.aggregated_after == Some(writes) {
        return false;
    }
    let wrote = aggregate_pass(store, res);
    if !wrote {
        store.aggregated_after = Some(writes);
    }
    wrote
}

fn aggregate_pass(store: &mut Store, res: usize) -> bool {
    let mut roles = store.list(res, None, &Default::default(), &Default::default());
    if !roles.iter().any(|r| r.get("aggregationRule").is_some()) {
        return false;
    }
    roles.sort_by(|a, b| {
        let n = |v: &Value| {
            v.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        n(a).cmp(&n(b))
    });
    let mut wrote = false;
    for agg in roles.iter().filter(|r| r.get("aggregationRule").is_some()) {
        let Some(name) = agg.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let selectors: Vec<LabelSelector> = agg
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(selector_of)
            .collect();
        let mut rules: Vec<Value> = Vec::new();
        for r in &roles {
            let other = r.pointer("/metadata/name").and_then(Value::as_str);
            if other == Some(name) || !selectors.iter().any(|s| s.matches(r)) {
                continue;
            }
            for rule in r
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
        let current = agg
            .get("rules")
            .cloned()
            .unwrap_or(Value::Array(Vec::new()));
        if current == Value::Array(rules.clone()) {
            continue;
        }
        let mut updated = agg.clone();
        updated["rules"] = Value::Array(rules);
        if let Some(m) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let ctx = WriteCtx {
            manager: "clusterrole-aggregation-controller".into(),
            scope: Scope::Everything,
            dry_run: false,
            keep_status: true,
            validation: None,
            warnings: Default::default(),
            user: None,
        };
        match store.update(res, "", name, updated, &ctx) {
            Ok(_) => wrote = true,
            Err(e) => tracing::debug!(clusterrole = name, "aggregation: {e}"),
        }
    }
    wrote
}

pub(crate) mod escalation;
#[cfg(test)]
mod tests;
