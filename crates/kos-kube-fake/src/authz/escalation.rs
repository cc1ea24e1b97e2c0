//! kube-apiserver's RBAC escalation prevention, which its rbac storage runs on every create and
//! update of a Role, ClusterRole, RoleBinding or ClusterRoleBinding (`pkg/registry/rbac/*/
//! policybased`), whatever authorizer is configured:
//! - members of `system:masters` (the loopback client among them) write what they like;
//! - a Role or ClusterRole is stored when its writer may `escalate` that resource (the request's
//!   name and namespace: a create has no name, so `escalate` limited by resourceNames never
//!   allows one), or holds every permission its rules grant (`ConfirmNoEscalation`, in the
//!   role's namespace); an `aggregationRule`, new or old, needs `*` on everything besides;
//! - a binding is stored when its writer may `bind` the role it refers to (`bind` on `roles` or
//!   `clusterroles` of that name, in the binding's namespace), or holds every permission of that
//!   role in the binding's namespace; a role that does not exist is then its 404;
//! - an update that changes only `ownerReferences` and `finalizers` (the garbage collector's) is
//!   not checked.
//!
//! A refusal is `errors.NewForbidden` of the object with `ConfirmNoEscalation`'s text: the user,
//! its groups and each missing permission on a line, as `CompactString` prints it after the
//! missing single-verb rules are `CompactRules`d.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleRef};
use serde_json::Value;

use super::{MASTERS, RequestInfo, User, all, applies_to, one};
use crate::error::{ApiError, ApiResult, Details};
use crate::resources::ResourceType;
use crate::schema::Write;
use crate::store::Store;

pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

/// The check of a write of `obj` (`old`: what is stored, on an update) by `user`. `how` says
/// whether the request named the object in its URL (a POST does not).
pub(crate) fn admit(
    store: &Store,
    rt: &ResourceType,
    user: &User,
    obj: &Value,
    old: Option<&Value>,
    how: Write,
) -> ApiResult<()> {
    if rt.group != GROUP || user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    let str_at = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let name = str_at(obj, "/metadata/name").unwrap_or_default();
    let ns = str_at(obj, "/metadata/namespace").unwrap_or_default();
    if old.is_some_and(|old| only_gc_fields(obj, old)) {
        return Ok(());
    }
    let refuse = |why: String| forbidden(rt, &name, why);
    match rt.kind.as_str() {
        "Role" | "ClusterRole" => {
            let request_name = if how == Write::Create {
                ""
            } else {
                name.as_str()
            };
            if may(
                store,
                user,
                "escalate",
                GROUP,
                &rt.plural,
                &ns,
                request_name,
            ) {
                return Ok(());
            }
            let rules = rules_of(obj);
            confirm_no_escalation(store, user, &ns, &rules).map_err(refuse)?;
            let aggregates = |v: &Value| {
                v.pointer("/aggregationRule/clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .is_some_and(|s| !s.is_empty())
            };
            if rt.kind == "ClusterRole"
                && (aggregates(obj) || old.is_some_and(aggregates))
                && confirm_no_escalation(store, user, "", &full_authority()).is_err()
            {
                return Err(refuse(
                    "must have cluster-admin privileges to use the aggregationRule".into(),
                ));
            }
            Ok(())
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let role_ref: RoleRef = obj
                .get("roleRef")
                .cloned()
                .and_then(|r| serde_json::from_value(r).ok())
                .unwrap_or_default();
            let referred = match role_ref.kind.as_str() {
                "ClusterRole" => Some("clusterroles"),
                "Role" => Some("roles"),
                _ => None,
            };
            if let Some(resource) = referred {
                let group = role_ref.api_group.as_deref().unwrap_or_default();
                if may(store, user, "bind", group, resource, &ns, &role_ref.name) {
                    return Ok(());
                }
            }
            let rules = referred_rules(store, &role_ref, &ns)?;
            confirm_no_escalation(store, user, &ns, &rules).map_err(refuse)
        }
        _ => Ok(()),
    }
}

/// `errors.NewForbidden` of the object being written.
fn forbidden(rt: &ResourceType, name: &str, why: String) -> ApiError {
    let what = if name.is_empty() {
        format!("{} is forbidden", rt.qualified())
    } else {
        format!("{} \"{name}\" is forbidden", rt.qualified())
    };
    let mut e = ApiError::new(403, "Forbidden", format!("{what}: {why}"));
    e.details = Some(Box::new(Details {
        name: (!name.is_empty()).then(|| name.to_owned()),
        group: Some(rt.group.clone()),
        kind: Some(rt.plural.clone()),
        causes: Vec::new(),
    }));
    e
}

/// Whether the authorizers allow `user` the (resource) request, as `a.Authorize` answers the
/// `escalate` and `bind` checks.
fn may(
    store: &Store,
    user: &User,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> bool {
    let info = RequestInfo {
        resource_request: true,
        verb: verb.to_owned(),
        api_group: group.to_owned(),
        namespace: ns.to_owned(),
        resource: resource.to_owned(),
        name: name.to_owned(),
        ..RequestInfo::default()
    };
    super::authorize(store, user, &info).is_ok()
}

/// `IsOnlyMutatingGCFields`: the objects are the same but for owner references and finalizers.
fn only_gc_fields(obj: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "ownerReferences",
                "finalizers",
                "selfLink",
                "managedFields",
                "resourceVersion",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(obj) == strip(old)
}

fn rules_of(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules")
        .cloned()
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default()
}

/// `*` on every resource of every group, and on every non-resource URL.
fn full_authority() -> Vec<PolicyRule> {
    let star = || vec!["*".to_owned()];
    vec![
        PolicyRule {
            api_groups: Some(star()),
            resources: Some(star()),
            verbs: star(),
            ..PolicyRule::default()
        },
        PolicyRule {
            non_resource_urls: Some(star()),
            verbs: star(),
            ..PolicyRule::default()
        },
    ]
}

/// `GetRoleReferenceRules`: the rules of the role a binding in `ns` refers to; a role that does
/// not exist is the storage's 404 of it.
fn referred_rules(store: &Store, role_ref: &RoleRef, ns: &str) -> ApiResult<Vec<PolicyRule>> {
    let missing = |plural: &str| match store.type_index(GROUP, "v1", plural) {
        Some(res) => ApiError::not_found(&store.types[res], &role_ref.name),
        None => ApiError::for_code(404, format!("{plural} \"{}\" not found", role_ref.name)),
    };
    match role_ref.kind.as_str() {
        "ClusterRole" => one::<ClusterRole>(store, "clusterroles", "", &role_ref.name)
            .map(|r| r.rules.unwrap_or_default())
            .ok_or_else(|| missing("clusterroles")),
        "Role" => one::<Role>(store, "roles", ns, &role_ref.name)
            .map(|r| r.rules.unwrap_or_default())
            .ok_or_else(|| missing("roles")),
        other => Err(ApiError::new(
            500,
            "",
            format!("unsupported role reference kind: {}", go_quote(other)),
        )),
    }
}

/// `RulesFor`: every rule the user holds through ClusterRoleBindings and, in `ns`, through
/// RoleBindings; and the bindings whose role is missing, as errors.
fn rules_for(store: &Store, user: &User, ns: &str) -> (Vec<PolicyRule>, Vec<String>) {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    let (mut rules, mut errors) = (Vec::new(), Vec::new());
    let mut add = |r: ApiResult<Vec<PolicyRule>>| match r {
        Ok(r) => rules.extend(r),
        Err(e) => errors.push(e.message),
    };
    for b in all::<ClusterRoleBinding>(store, "clusterrolebindings", None) {
        if b.subjects
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|s| applies_to(s, user, ""))
        {
            add(referred_rules(store, &b.role_ref, ""));
        }
    }
    if !ns.is_empty() {
        for b in all::<RoleBinding>(store, "rolebindings", Some(ns)) {
            if b.subjects
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|s| applies_to(s, user, ns))
            {
                add(referred_rules(store, &b.role_ref, ns));
            }
        }
    }
    (rules, errors)
}

/// `ConfirmNoEscalation`: `Err` with its message when `user` does not hold, in `ns`, every
/// permission `rules` grant.
fn confirm_no_escalation(
    store: &Store,
    user: &User,
    ns: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (owner, errors) = rules_for(store, user, ns);
    let missing = uncovered(&owner, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        lines.join("\n")
    );
    if !errors.is_empty() {
        // `%v` of a one-element slice of the resolver's aggregate error.
        let aggregate = if errors.len() == 1 {
            errors[0].clone()
        } else {
            format!("[{}]", errors.join(", "))
        };
        msg.push_str(&format!("; resolution errors: [{aggregate}]"));
    }
    Err(msg)
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

fn one_of(s: &str) -> Option<Vec<String>> {
    Some(vec![s.to_owned()])
}

/// `BreakdownRule`: one rule per group, resource, verb (and resource name), and per non-resource
/// URL and verb.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for g in list(&rule.api_groups) {
        for r in list(&rule.resources) {
            for v in &rule.verbs {
                let atom = |names: Option<Vec<String>>| PolicyRule {
                    api_groups: one_of(g),
                    resources: one_of(r),
                    verbs: vec![v.clone()],
                    resource_names: names,
                    ..PolicyRule::default()
                };
                if list(&rule.resource_names).is_empty() {
                    out.push(atom(None));
                } else {
                    out.extend(list(&rule.resource_names).iter().map(|n| atom(one_of(n))));
                }
            }
        }
    }
    for u in list(&rule.non_resource_urls) {
        for v in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one_of(u),
                verbs: vec![v.clone()],
                ..PolicyRule::default()
            });
        }
    }
    out
}

/// `validation.Covers`: the broken-down rules of `servant` that no rule of `owner` covers.
fn uncovered(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    servant
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| covers(o, sub)))
        .collect()
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// `ruleCovers` of an owner rule over one broken-down rule: `*` verbs, groups and resources,
/// `*/subresource`, resourceNames (an owner limited by names covers no unnamed rule) and
/// non-resource URLs with a trailing `*`.
fn covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), "*")
        || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let owned = list(&owner.resources);
    let resources = has(owned, "*")
        || list(&sub.resources).iter().all(|r| {
            has(owned, r)
                || r.split_once('/')
                    .is_some_and(|(_, subresource)| has(owned, &format!("*/{subresource}")))
        });
    let urls = list(&sub.non_resource_urls).iter().all(|path| {
        list(&owner.non_resource_urls)
            .iter()
            .any(|o| o == path || (o.ends_with('*') && path.starts_with(o.trim_end_matches('*'))))
    });
    let names = if list(&sub.resource_names).is_empty() {
        list(&owner.resource_names).is_empty()
    } else {
        list(&owner.resource_names).is_empty()
            || has_all(list(&owner.resource_names), list(&sub.resource_names))
    };
    verbs && groups && resources && urls && names
}

/// `CompactRules`: rules of one group, one resource and at most one name, nothing else, merged
/// into one with all their verbs (in the order met); the others as they are.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = list(&rule.resource_names).len() <= 1
            && list(&rule.non_resource_urls).is_empty()
            && list(&rule.api_groups).len() == 1
            && list(&rule.resources).len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        let same = |r: &PolicyRule| {
            r.api_groups == rule.api_groups
                && r.resources == rule.resources
                && list(&r.resource_names) == list(&rule.resource_names)
        };
        match simple.iter_mut().find(|r| same(r)) {
            Some(r) => r.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    out.extend(simple);
    out
}

/// `rbacv1helpers.CompactString`: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    let mut part = |label: &str, v: &[String]| {
        if !v.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(v)));
        }
    };
    part("APIGroups", list(&r.api_groups));
    part("Resources", list(&r.resources));
    part("NonResourceURLs", list(&r.non_resource_urls));
    part("ResourceNames", list(&r.resource_names));
    part("Verbs", &r.verbs);
    format!("{{{}}}", parts.join(", "))
}

/// Go's `%q` of a string.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            verbs: v(verbs),
            ..PolicyRule::default()
        }
    }

    #[test]
    fn stars_subresources_names_and_urls_cover_as_upstream() {
        let all = rule(&["*"], &["*"], &["*"]);
        let pods = rule(&[""], &["pods"], &["get", "list"]);
        assert!(uncovered(std::slice::from_ref(&all), std::slice::from_ref(&pods)).is_empty());
        // A resource rule never covers a URL.
        let url = PolicyRule {
            non_resource_urls: Some(vec!["/healthz".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        };
        assert_eq!(
            uncovered(&[all], std::slice::from_ref(&url)),
            vec![url.clone()]
        );
        let prefix = PolicyRule {
            non_resource_urls: Some(vec!["/health*".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        };
        assert!(uncovered(&[prefix], &[url]).is_empty());
        // `*/status` covers `pods/status`, not `pods`.
        let status = rule(&[""], &["*/status"], &["update"]);
        assert!(
            uncovered(
                std::slice::from_ref(&status),
                &[rule(&[""], &["pods/status"], &["update"])]
            )
            .is_empty()
        );
        assert_eq!(
            uncovered(&[status], &[rule(&[""], &["pods"], &["update"])]).len(),
            1
        );
        // An owner limited to names covers those names only, never the unnamed rule.
        let mut named = rule(&[""], &["configmaps"], &["get"]);
        named.resource_names = Some(vec!["a".into()]);
        assert!(uncovered(std::slice::from_ref(&named), std::slice::from_ref(&named)).is_empty());
        assert_eq!(
            uncovered(&[named], &[rule(&[""], &["configmaps"], &["get"])]).len(),
            1
        );
    }

    #[test]
    fn missing_rights_print_as_compact_strings() {
        let missing = uncovered(&[], &[rule(&["", "apps"], &["pods"], &["get", "list"])]);
        let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
        lines.sort();
        assert_eq!(
            lines,
            vec![
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}"#,
                r#"{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "list"]}"#,
            ]
        );
    }
}
