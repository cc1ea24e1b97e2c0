//! What to write back to a Service, as merge patches computed from the Service as it is: each is
//! `None` when the Service already says it, so a pass with nothing new writes nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service};
use serde_json::{Map, Value, json};

use super::FINALIZER;

/// `type: LoadBalancer` with the class kos-ccm answers to (`None`: Services without a class).
pub(crate) fn wants_load_balancer(svc: &Service, class: Option<&str>) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.as_deref() == class
    })
}

pub(crate) fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// The finalizer list with ours added or removed; `None` when it already is so. The patch carries
/// the resourceVersion it was computed from: a finalizer someone else changed meanwhile is never
/// lost (the write fails with 409 and the pass runs again).
pub(crate) fn finalizer_patch(svc: &Service, present: bool) -> Option<Value> {
    if has_finalizer(svc) == present {
        return None;
    }
    let mut list: Vec<String> = svc
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    if present {
        list.push(FINALIZER.to_owned());
    }
    Some(json!({
        "metadata": {
            "finalizers": list,
            "resourceVersion": svc.metadata.resource_version,
        }
    }))
}

/// Sets `set` and removes `remove`, only where the Service differs.
pub(crate) fn annotations_patch(
    svc: &Service,
    set: &BTreeMap<String, String>,
    remove: &[&str],
) -> Option<Value> {
    let have = svc.metadata.annotations.clone().unwrap_or_default();
    let mut patch = Map::new();
    for (k, v) in set {
        if have.get(k) != Some(v) {
            patch.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in remove {
        if have.contains_key(*k) && !set.contains_key(*k) {
            patch.insert((*k).to_owned(), Value::Null);
        }
    }
    (!patch.is_empty()).then(|| json!({"metadata": {"annotations": patch}}))
}

fn ingress(status: Option<&LoadBalancerStatus>) -> &[LoadBalancerIngress] {
    status
        .and_then(|s| s.ingress.as_deref())
        .unwrap_or_default()
}

/// `status.loadBalancer` set to `want` (`None`: cleared), if it is not already.
pub(crate) fn status_patch(svc: &Service, want: Option<&LoadBalancerStatus>) -> Option<Value> {
    let have = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref());
    if ingress(have) == ingress(want) {
        return None;
    }
    Some(match want {
        // A merge patch replaces the whole list.
        Some(s) => json!({"status": {"loadBalancer": s}}),
        None => json!({"status": {"loadBalancer": {"ingress": null}}}),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ServiceSpec, ServiceStatus};

    use super::*;

    fn svc() -> Service {
        let mut s = Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        s.metadata.resource_version = Some("42".into());
        s
    }

    fn lb_status(ip: &str) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(ip.into()),
                ip_mode: Some("VIP".into()),
                ..LoadBalancerIngress::default()
            }]),
        }
    }

    #[test]
    fn classes_decide_which_services_are_ours() {
        let mut s = svc();
        assert!(wants_load_balancer(&s, None));
        assert!(!wants_load_balancer(&s, Some("kos")));
        let spec = s.spec.get_or_insert_with(ServiceSpec::default);
        spec.load_balancer_class = Some("kos".into());
        assert!(!wants_load_balancer(&s, None));
        assert!(wants_load_balancer(&s, Some("kos")));
        s.spec.get_or_insert_with(ServiceSpec::default).type_ = Some("NodePort".into());
        assert!(!wants_load_balancer(&s, Some("kos")));
    }

    #[test]
    fn finalizers_of_others_are_kept_and_the_version_is_a_precondition() {
        let mut s = svc();
        s.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        let add = finalizer_patch(&s, true).expect("add");
        assert_eq!(
            add,
            json!({"metadata": {"finalizers": ["example.com/keep", FINALIZER], "resourceVersion": "42"}})
        );
        s.metadata.finalizers = Some(vec!["example.com/keep".into(), FINALIZER.into()]);
        assert_eq!(finalizer_patch(&s, true), None);
        let remove = finalizer_patch(&s, false).expect("remove");
        assert_eq!(
            remove.pointer("/metadata/finalizers"),
            Some(&json!(["example.com/keep"]))
        );
    }

    #[test]
    fn only_differing_annotations_are_patched() {
        let mut s = svc();
        s.metadata.annotations = Some(BTreeMap::from([
            ("a/id".to_owned(), "1".to_owned()),
            ("a/address".to_owned(), "203.0.113.9".to_owned()),
        ]));
        let same = BTreeMap::from([("a/id".to_owned(), "1".to_owned())]);
        assert_eq!(annotations_patch(&s, &same, &[]), None);
        assert_eq!(annotations_patch(&s, &same, &["a/id", "a/missing"]), None);
        let new = BTreeMap::from([("a/id".to_owned(), "2".to_owned())]);
        assert_eq!(
            annotations_patch(&s, &new, &["a/address"]),
            Some(json!({"metadata": {"annotations": {"a/id": "2", "a/address": null}}}))
        );
    }

    #[test]
    fn status_is_patched_only_when_the_ingress_differs() {
        let mut s = svc();
        assert_eq!(status_patch(&s, None), None);
        let want = lb_status("203.0.113.9");
        let p = status_patch(&s, Some(&want)).expect("patch");
        assert_eq!(
            p,
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9", "ipMode": "VIP"}]}}})
        );
        s.status = Some(ServiceStatus {
            load_balancer: Some(want.clone()),
            ..ServiceStatus::default()
        });
        assert_eq!(status_patch(&s, Some(&want)), None);
        assert!(status_patch(&s, Some(&lb_status("203.0.113.10"))).is_some());
        assert_eq!(
            status_patch(&s, None),
            Some(json!({"status": {"loadBalancer": {"ingress": null}}}))
        );
        // An empty ingress list is no status at all.
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![]),
            }),
            ..ServiceStatus::default()
        });
        assert_eq!(status_patch(&s, None), None);
    }
}
