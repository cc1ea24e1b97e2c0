//! The real drain through [`Kube`] against kos-kube-fake served over TLS as a kubeadm-made API
//! server is (serving certificate and client certificates of the cluster CA): a Deployment-like set
//! of pods whose PodDisruptionBudget blocks an eviction, DaemonSet and mirror pods, a pod on another
//! node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node as KNode, Pod as KPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use kos_kube_fake::{FakeKube, TlsFront, TlsServing};
use serde_json::json;

use super::*;

const TOO_MANY: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

struct Cluster {
    fake: FakeKube,
    kube: Kube,
    _front: TlsFront,
}

/// A serving certificate for 127.0.0.1 signed by the cluster CA (PEM cert and key).
fn serving_cert(ca: &kos_bootstrap::pki::CaPair) -> (String, String) {
    let ca_key = rcgen::KeyPair::from_pem(ca.key_pem.expose()).expect("ca key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    p.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip"))];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// Nodes w-1 and w-2; on w-1 three ready `web` pods of one ReplicaSet behind the budget `web`
/// (minAvailable 2), a DaemonSet's pod and a mirror pod; on w-2 one more `web` pod's neighbour.
async fn cluster() -> Cluster {
    let secrets = ClusterSecrets::generate(
        &mut rand::rng(),
        time::OffsetDateTime::now_utc(),
        kos_bootstrap::DEFAULT_TOKEN_TTL,
    )
    .expect("secrets");
    let fake = FakeKube::start().await.expect("fake");
    // What kubeadm init binds for admin.conf's group (1.29+): kos's admin certificate is in it, and
    // the fake authorises as kube-apiserver's RBAC does.
    let admins: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubeadm:cluster-admins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"}],
    }))
    .expect("binding");
    fake.insert(&admins).expect("bind the admins");
    let (cert, key) = serving_cert(&secrets.ca);
    let front = fake
        .serve_tls(&TlsServing {
            cert_chain_pem: cert,
            key_pem: key,
            client_ca_pem: secrets.ca.cert_pem.clone(),
        })
        .expect("tls");
    let version: KubeVersion = "1.36.4".parse().expect("version");
    let kube = Kube::connect(
        &ApiEndpoint {
            host: "127.0.0.1".into(),
            port: front.addr().port(),
        },
        None,
        &version,
        &secrets,
    )
    .expect("client");
    for n in ["w-1", "w-2"] {
        let node: KNode = serde_json::from_value(json!({
            "metadata": {"name": n},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        fake.insert(&node).unwrap();
    }
    let pod = |ns: &str, name: &str, node: &str, meta: serde_json::Value| {
        let mut metadata = json!({"name": name, "namespace": ns});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        let p: KPod = serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        }))
        .unwrap();
        fake.insert(&p).unwrap();
        fake.modify::<KPod>(Some(ns), name, |p| {
            p.status = serde_json::from_value(json!({
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            }))
            .unwrap();
        })
        .unwrap();
    };
    let owned = |kind: &str, name: &str| {
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": name,
                "uid": format!("uid-{name}"), "controller": true}])
    };
    for i in 0..3 {
        pod(
            "default",
            &format!("web-{i}"),
            "w-1",
            json!({"labels": {"app": "web"}, "ownerReferences": owned("ReplicaSet", "web-abc")}),
        );
    }
    pod(
        "kube-system",
        "kube-proxy-x",
        "w-1",
        json!({"ownerReferences": owned("DaemonSet", "kube-proxy")}),
    );
    pod(
        "kube-system",
        "etcd-w-1",
        "w-1",
        json!({"annotations": {MIRROR_ANNOTATION: "abc"}}),
    );
    pod(
        "default",
        "other",
        "w-2",
        json!({"ownerReferences": owned("ReplicaSet", "other-abc")}),
    );
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    fake.insert(&pdb).unwrap();
    Cluster {
        fake,
        kube,
        _front: front,
    }
}

impl Cluster {
    fn pods_on(&self, node: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .fake
            .list::<KPod>(None)
            .unwrap()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    }

    /// Eviction requests answered `status`, by pod name.
    fn evictions(&self, status: u16) -> Vec<String> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.subresource.as_deref() == Some("eviction") && r.status == status)
            .filter_map(|r| r.name)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_blocks_the_drain_until_it_allows_the_eviction() {
    let c = cluster().await;
    // The budget's owner relaxes it once the drain has been refused twice.
    let fake_requests = {
        let c = &c;
        async move {
            while c.evictions(429).len() < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            c.fake
                .modify::<PodDisruptionBudget>(Some("default"), "web", |b| {
                    if let Some(s) = b.spec.as_mut() {
                        s.min_available =
                            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0));
                    }
                })
                .unwrap();
        }
    };
    let opts = Options {
        timeout: Duration::from_secs(120),
        poll: Duration::from_millis(50),
        skip_wait_for_delete: Duration::from_secs(300),
    };
    let mut said = Vec::new();
    let mut say = |l: &str| said.push(l.to_owned());
    let (drained, ()) = tokio::join!(drain_node(&c.kube, "w-1", opts, &mut say), fake_requests);
    let d = drained.expect("drained");
    let mut evicted = d.evicted.clone();
    evicted.sort();
    assert_eq!(evicted, ["default/web-0", "default/web-1", "default/web-2"]);
    // Only the DaemonSet's and the mirror pod stay; the other node is untouched.
    assert_eq!(c.pods_on("w-1"), ["etcd-w-1", "kube-proxy-x"]);
    assert_eq!(c.pods_on("w-2"), ["other"]);
    let node = c.fake.get::<KNode>(None, "w-1").unwrap().unwrap();
    assert_eq!(node.spec.and_then(|s| s.unschedulable), Some(true));
    let refused = c.evictions(429);
    assert!(refused.len() >= 2, "{refused:?}");
    let mut done = c.evictions(201);
    done.sort();
    assert_eq!(done, ["web-0", "web-1", "web-2"]);
    assert!(said.iter().any(|l| l == "cordoned node w-1"), "{said:?}");

    // Drained again: nothing to evict, and a Node that is gone is nothing to drain.
    let again = drain_node(&c.kube, "w-1", opts, &mut |_| {}).await.unwrap();
    assert!(again.evicted.is_empty());
    drain::remove_node(&Api(&c.kube), "w-1").await.unwrap();
    assert!(c.fake.get::<KNode>(None, "w-1").unwrap().is_none());
    drain::remove_node(&Api(&c.kube), "w-1").await.unwrap();
    assert!(
        drain_node(&c.kube, "w-1", opts, &mut |_| {})
            .await
            .unwrap()
            .node_missing
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_never_allows_it_times_out_naming_the_budget() {
    let c = cluster().await;
    let opts = Options {
        timeout: Duration::from_secs(1),
        poll: Duration::from_millis(50),
        skip_wait_for_delete: Duration::from_secs(300),
    };
    let e = drain_node(&c.kube, "w-1", opts, &mut |_| {})
        .await
        .unwrap_err();
    let text = e.to_string();
    for want in [
        "node w-1 was not drained within 1s",
        "pod default/web-1 cannot be evicted: PodDisruptionBudget default/web allows no disruption",
        TOO_MANY,
        "The disruption budget web needs 2 healthy pods and has 2 currently",
        "raise the budget's maxUnavailable, scale its workload, or evict by hand",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    // One went (the budget allowed one disruption), the others stay, and were tried every poll.
    assert_eq!(c.pods_on("w-1").len(), 4, "{:?}", c.pods_on("w-1"));
    assert!(c.evictions(429).len() > 2);
}

/// An answer of status `code` with body `body`, as the client reads it.
fn answered(code: u16, body: &serde_json::Value) -> Result<serde_json::Value, KubeError> {
    if (200..300).contains(&code) {
        Ok(body.clone())
    } else {
        Err(KubeError::from_answer(
            "POST eviction".into(),
            code,
            body.to_string().as_bytes(),
        ))
    }
}

#[test]
fn evictions_are_told_apart_as_kube_apiserver_answers_them() {
    let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201});
    assert!(matches!(eviction_of(answered(201, &ok)), Eviction::Evicted));
    let gone = json!({"kind": "Status", "status": "Failure", "reason": "NotFound",
        "message": "pods \"web-0\" not found", "code": 404});
    assert!(matches!(eviction_of(answered(404, &gone)), Eviction::Gone));
    let blocked = json!({"kind": "Status", "status": "Failure", "reason": "TooManyRequests",
        "message": TOO_MANY, "code": 429, "details": {"causes": [{"reason": "DisruptionBudget",
        "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}});
    let Eviction::Blocked(b) = eviction_of(answered(429, &blocked)) else {
        panic!("not blocked")
    };
    assert_eq!(
        b,
        Blocked {
            budget: Some("web".into()),
            message: format!(
                "{TOO_MANY} The disruption budget web needs 2 healthy pods and has 2 currently"
            ),
        }
    );
    let two = json!({"kind": "Status", "status": "Failure", "code": 500, "message":
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."});
    let Eviction::Failed(e) = eviction_of(answered(500, &two)) else {
        panic!("not failed")
    };
    assert_eq!(
        e.to_string(),
        "HTTP 500: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    let Eviction::Failed(e) = eviction_of(answered(502, &serde_json::Value::Null)) else {
        panic!("not failed")
    };
    assert!(e.is_transient());
    assert_eq!(e.to_string(), "HTTP 502");
}
