//! The fake driven through the real kube-rs client: every verb, the errors clients branch on,
//! patches, server-side apply and the request log.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, NodeSpec, Service, ServiceSpec, ServiceStatus, Taint,
};
use kos_kube_fake::{FakeKube, Fault, PatchType, Verb};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

fn node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n
}

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    c
}

fn api_err(e: kube::Error) -> Result<(u16, String), kube::Error> {
    match e {
        kube::Error::Api(s) => Ok((s.code, s.reason)),
        other => Err(other),
    }
}

#[tokio::test]
async fn create_get_list_and_server_metadata() -> R {
    let fake = FakeKube::start().await?;
    let nodes: Api<Node> = Api::all(fake.client()?);
    let created = nodes.create(&PostParams::default(), &node("n1")).await?;
    let uid = created.metadata.uid.clone().ok_or("no uid")?;
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .ok_or("no rv")?
        .parse()?;
    nodes.create(&PostParams::default(), &node("n2")).await?;
    let got = nodes.get("n1").await?;
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    let list = nodes.list(&ListParams::default()).await?;
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert_eq!(names, ["n1", "n2"]);
    let list_rv: u64 = list
        .metadata
        .resource_version
        .ok_or("no list rv")?
        .parse()?;
    assert_eq!(list_rv, rv1 + 1, "one bump per write");

    // generateName
    let cms: Api<ConfigMap> = Api::namespaced(fake.client()?, "default");
    let mut g = ConfigMap::default();
    g.metadata.generate_name = Some("cfg-".into());
    let made = cms.create(&PostParams::default(), &g).await?;
    let name = made.metadata.name.ok_or("no name")?;
    assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");
    assert_eq!(made.metadata.namespace.as_deref(), Some("default"));
    Ok(())
}

#[tokio::test]
async fn errors_carry_the_real_codes_and_reasons() -> R {
    let fake = FakeKube::start().await?;
    let nodes: Api<Node> = Api::all(fake.client()?);
    assert_eq!(
        api_err(nodes.get("nope").await.err().ok_or("found")?)?,
        (404, "NotFound".into())
    );
    nodes.create(&PostParams::default(), &node("n1")).await?;
    let e = nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .err()
        .ok_or("created twice")?;
    assert_eq!(api_err(e)?, (409, "AlreadyExists".into()));

    let mut bad = node("n2");
    bad.metadata.labels = Some(BTreeMap::from([("zone".into(), "eu west 1".into())]));
    bad.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: "k".into(),
            effect: "Sometimes".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let e = nodes
        .create(&PostParams::default(), &bad)
        .await
        .err()
        .ok_or("accepted")?;
    let kube::Error::Api(s) = e else {
        return Err("not an API error".into());
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        s.message.contains("metadata.labels") && s.message.contains("spec.taints[0].effect"),
        "{}",
        s.message
    );

    // Stale resourceVersion on replace.
    let mut n = nodes.get("n1").await?;
    n.metadata.labels = Some(BTreeMap::from([("a".into(), "1".into())]));
    nodes.replace("n1", &PostParams::default(), &n).await?;
    n.metadata.labels = Some(BTreeMap::from([("a".into(), "2".into())]));
    let e = nodes
        .replace("n1", &PostParams::default(), &n)
        .await
        .err()
        .ok_or("stale write accepted")?;
    let kube::Error::Api(s) = e else {
        return Err("not an API error".into());
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(
        s.message.contains("the object has been modified"),
        "{}",
        s.message
    );

    // providerID may only go from "" to a value.
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": "openstack:///a"}})),
        )
        .await?;
    let e = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": "openstack:///b"}})),
        )
        .await
        .err()
        .ok_or("providerID changed")?;
    assert_eq!(api_err(e)?, (422, "Invalid".into()));
    Ok(())
}

#[tokio::test]
async fn deletion_waits_for_finalizers_and_honours_preconditions() -> R {
    let fake = FakeKube::start().await?;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client()?, "default");
    let mut c = cm("c1", &[]);
    c.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let made = cms.create(&PostParams::default(), &c).await?;

    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(
        api_err(cms.delete("c1", &wrong).await.err().ok_or("deleted")?)?.0,
        409
    );

    cms.delete("c1", &DeleteParams::default()).await?;
    let pending = cms.get("c1").await?;
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.uid, made.metadata.uid);

    // The last finalizer going completes the deletion.
    cms.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(
            json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        )?),
    )
    .await?;
    assert_eq!(
        api_err(cms.get("c1").await.err().ok_or("still there")?)?.0,
        404
    );
    Ok(())
}

#[tokio::test]
async fn patches_merge_strategic_json_and_the_status_subresource() -> R {
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut n = node("n1");
    n.metadata.finalizers = Some(vec!["a.io/x".into()]);
    n.spec = Some(NodeSpec {
        taints: Some(vec![
            Taint {
                key: "t1".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
            Taint {
                key: "t2".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    nodes.create(&PostParams::default(), &n).await?;

    let pp = PatchParams::default();
    nodes
        .patch("n1", &pp, &Patch::Strategic(json!({"metadata": {"finalizers": ["b.io/y"]}, "spec": {"taints": [{"key": "t2", "effect": "NoSchedule"}]}})))
        .await?;
    let got = nodes.get("n1").await?;
    assert_eq!(
        got.metadata.finalizers,
        Some(vec!["a.io/x".into(), "b.io/y".into()])
    );
    let taints = got.spec.and_then(|s| s.taints).unwrap_or_default();
    assert_eq!(
        taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
        ["t2"]
    );

    // The main resource ignores status; /status ignores the rest.
    nodes
        .patch(
            "n1",
            &pp,
            &Patch::Merge(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}),
            ),
        )
        .await?;
    assert!(
        nodes
            .get("n1")
            .await?
            .status
            .and_then(|s| s.addresses)
            .is_none()
    );
    nodes
        .patch_status("n1", &pp, &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.2"}]}})))
        .await?;
    let got = nodes.get("n1").await?;
    assert_eq!(
        got.status.and_then(|s| s.addresses).map(|a| a.len()),
        Some(2)
    );
    assert!(got.metadata.labels.is_none());

    // A resourceVersion in a patch is a precondition.
    let e = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})),
        )
        .await
        .err()
        .ok_or("stale patch accepted")?;
    assert_eq!(api_err(e)?, (409, "Conflict".into()));

    // JSON patch with a failing test op changes nothing.
    let before = fake.resource_version();
    let e = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
                {"op": "test", "path": "/spec/providerID", "value": "x"}
            ]))?),
        )
        .await
        .err()
        .ok_or("failed test op accepted")?;
    assert_eq!(api_err(e)?.0, 422);
    assert_eq!(fake.resource_version(), before);

    // A no-op write is not a write.
    let same = nodes.get("n1").await?;
    let again = nodes.replace("n1", &PostParams::default(), &same).await?;
    assert_eq!(
        again.metadata.resource_version,
        same.metadata.resource_version
    );

    // Service status subresource: a create drops the status, /status writes it.
    let svcs: Api<Service> = Api::namespaced(client, "default");
    let mut s = Service::default();
    s.metadata.name = Some("web".into());
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ..Default::default()
    });
    s.status = Some(ServiceStatus {
        conditions: None,
        load_balancer: None,
    });
    svcs.create(&PostParams::default(), &s).await?;
    svcs.patch_status(
        "web",
        &pp,
        &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}})),
    )
    .await?;
    let ip = svcs
        .get("web")
        .await?
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .and_then(|i| i.first().and_then(|x| x.ip.clone()));
    assert_eq!(ip.as_deref(), Some("192.0.2.10"));
    Ok(())
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_refuses_to_steal_them() -> R {
    let fake = FakeKube::start().await?;
    let leases: Api<Lease> = Api::namespaced(fake.client()?, "kube-system");
    let apply = |who: &str| {
        Patch::Apply(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"holderIdentity": who, "leaseDurationSeconds": 15}
        }))
    };
    // Apply creates.
    leases
        .patch("ccm", &PatchParams::apply("a"), &apply("a"))
        .await?;
    let l = leases.get("ccm").await?;
    assert_eq!(l.spec.and_then(|s| s.holder_identity).as_deref(), Some("a"));
    let managers: Vec<_> = l
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, [("a".to_owned(), "Apply".to_owned())]);

    let e = leases
        .patch("ccm", &PatchParams::apply("b"), &apply("b"))
        .await
        .err()
        .ok_or("b stole the lease")?;
    let kube::Error::Api(s) = e else {
        return Err("not an API error".into());
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(
        s.message.contains("conflict with \"a\"") && s.message.contains(".spec.holderIdentity"),
        "{}",
        s.message
    );

    leases
        .patch("ccm", &PatchParams::apply("b").force(), &apply("b"))
        .await?;
    // Forced: b owns holderIdentity now, so a's re-apply of its old value conflicts with b.
    let e = leases
        .patch("ccm", &PatchParams::apply("a"), &apply("a"))
        .await
        .err()
        .ok_or("a took it back")?;
    let kube::Error::Api(s) = e else {
        return Err("not an API error".into());
    };
    assert!(s.message.contains("conflict with \"b\""), "{}", s.message);
    // An update (not an apply) takes ownership without conflicts.
    leases
        .patch(
            "ccm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "c"}})),
        )
        .await?;
    let owners: Vec<_> = leases
        .get("ccm")
        .await?
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    // b keeps leaseDurationSeconds; holderIdentity went to the updater.
    assert!(
        owners.contains(&("b".to_owned(), "Apply".to_owned())),
        "{owners:?}"
    );
    assert!(owners.iter().any(|(_, op)| op == "Update"), "{owners:?}");
    assert_eq!(
        leases
            .get("ccm")
            .await?
            .spec
            .and_then(|s| s.holder_identity)
            .as_deref(),
        Some("c")
    );
    // b no longer owns holderIdentity: its apply of "b" is a conflict with the updater.
    assert_eq!(
        api_err(
            leases
                .patch("ccm", &PatchParams::apply("b"), &apply("b"))
                .await
                .err()
                .ok_or("b overwrote the updater")?
        )?,
        (409, "Conflict".into())
    );
    // Apply needs a field manager.
    let e = leases
        .patch("ccm", &PatchParams::default(), &apply("c"))
        .await
        .err()
        .ok_or("apply without manager")?;
    assert_eq!(api_err(e)?.0, 400);
    Ok(())
}

#[tokio::test]
async fn lease_manager_elects_one_leader_through_the_fake() -> R {
    use kube_lease_manager::LeaseManagerBuilder;
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let a = LeaseManagerBuilder::new(client.clone(), "kos-ccm")
        .with_namespace("kube-system")
        .with_identity("a")
        .with_duration(3)
        .with_grace(1)
        .build()
        .await?;
    let b = LeaseManagerBuilder::new(client.clone(), "kos-ccm")
        .with_namespace("kube-system")
        .with_identity("b")
        .with_duration(3)
        .with_grace(1)
        .build()
        .await?;
    assert!(a.changed().await?, "a becomes leader of a free lease");
    // b cannot take a held lease: its `changed()` keeps waiting (a's 3 s lease outlives the wait).
    let waiting = tokio::time::timeout(std::time::Duration::from_millis(1500), b.changed()).await;
    assert!(waiting.is_err(), "b took a held lease: {waiting:?}");
    a.release().await?;
    // b notices when its view of a's lease expires.
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), b.changed()).await??;
    assert!(got, "b leads once a released");
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    assert_eq!(
        leases
            .get("kos-ccm")
            .await?
            .spec
            .and_then(|s| s.holder_identity)
            .as_deref(),
        Some("b")
    );
    Ok(())
}

#[tokio::test]
async fn selectors_pagination_and_metadata_only_lists() -> R {
    let fake = FakeKube::start().await?;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client()?, "default");
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web"), ("d", "cache")] {
        cms.create(&PostParams::default(), &cm(name, &[("tier", tier)]))
            .await?;
    }
    let other: Api<ConfigMap> = Api::namespaced(fake.client()?, "other");
    other
        .create(&PostParams::default(), &cm("z", &[("tier", "web")]))
        .await?;

    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    assert_eq!(
        names(cms.list(&ListParams::default().labels("tier=web")).await?),
        ["a", "c"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier in (db,cache)"))
                .await?
        ),
        ["b", "d"]
    );
    assert_eq!(
        names(cms.list(&ListParams::default().labels("tier!=web")).await?),
        ["b", "d"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=c"))
                .await?
        ),
        ["c"]
    );
    let all: Api<ConfigMap> = Api::all(fake.client()?);
    assert_eq!(
        names(all.list(&ListParams::default().labels("tier=web")).await?),
        ["a", "c", "z"]
    );

    let page1 = cms.list(&ListParams::default().limit(3)).await?;
    let token = page1
        .metadata
        .continue_
        .clone()
        .ok_or("no continue token")?;
    assert_eq!(names(page1), ["a", "b", "c"]);
    let page2 = cms
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await?;
    assert!(
        page2
            .metadata
            .continue_
            .as_deref()
            .is_none_or(str::is_empty)
    );
    assert_eq!(names(page2), ["d"]);

    let meta = cms.list_metadata(&ListParams::default()).await?;
    assert_eq!(meta.items.len(), 4);
    assert_eq!(
        cms.get_metadata("a").await?.metadata.name.as_deref(),
        Some("a")
    );
    assert_eq!(
        api_err(
            cms.list(&ListParams::default().labels("tier in web"))
                .await
                .err()
                .ok_or("bad selector")?
        )?
        .0,
        400
    );
    Ok(())
}

#[tokio::test]
async fn the_request_log_counts_writes_and_faults_are_injected() -> R {
    let fake = FakeKube::start().await?;
    let nodes: Api<Node> = Api::all(fake.client()?);
    nodes.create(&PostParams::default(), &node("n1")).await?;
    nodes.get("n1").await?;
    nodes.list(&ListParams::default()).await?;
    nodes
        .patch(
            "n1",
            &PatchParams::apply("me"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"labels": {"a": "b"}}}),
            ),
        )
        .await?;
    let reqs = fake.requests();
    let verbs: Vec<Verb> = reqs.iter().map(|r| r.verb).collect();
    assert_eq!(verbs, [Verb::Create, Verb::Get, Verb::List, Verb::Patch]);
    assert_eq!(reqs[3].patch, Some(PatchType::Apply));
    assert_eq!(reqs[3].field_manager.as_deref(), Some("me"));
    assert_eq!(reqs[3].name.as_deref(), Some("n1"));
    assert_eq!(fake.writes().len(), 2);

    fake.clear_requests();
    fake.inject(Fault::new(409).verb(Verb::Patch).resource("nodes").times(1));
    let e = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"c": "d"}}})),
        )
        .await
        .err()
        .ok_or("fault not injected")?;
    assert_eq!(api_err(e)?, (409, "Conflict".into()));
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"c": "d"}}})),
        )
        .await?;
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [409, 200]);
    assert_eq!(fake.writes().len(), 1);

    // Test-side helpers are not requests.
    fake.modify::<Node>(None, "n1", |n| {
        n.metadata
            .labels
            .get_or_insert_default()
            .insert("e".into(), "f".into());
    })?;
    assert_eq!(fake.requests().len(), 2);
    let n = fake.get::<Node>(None, "n1")?.ok_or("gone")?;
    assert_eq!(
        n.metadata
            .labels
            .and_then(|l| l.get("e").cloned())
            .as_deref(),
        Some("f")
    );
    Ok(())
}

#[tokio::test]
async fn discovery_answers_what_kube_asks() -> R {
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let v = client.apiserver_version().await?;
    assert_eq!(v.major, "1");
    let discovery = kube::Discovery::new(client).run().await?;
    assert!(discovery.has_group("coordination.k8s.io"));
    assert!(discovery.has_group("events.k8s.io"));
    Ok(())
}
