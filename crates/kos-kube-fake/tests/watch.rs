//! Watches through kube-runtime: the watcher and reflector see every change, resume after 410,
//! honour selectors, and the event Recorder's Events land in the fake.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kos_kube_fake::{Config, FakeKube};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use tokio::time::{Instant, timeout};

type R = Result<(), Box<dyn std::error::Error>>;

const DEADLINE: Duration = Duration::from_secs(30);

fn cm(name: &str, tier: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some([("tier".to_owned(), tier.to_owned())].into());
    c
}

/// Polls until `ok` holds (level-triggered, generous deadline).
async fn eventually<F: FnMut() -> bool>(what: &str, mut ok: F) -> R {
    let end = Instant::now() + DEADLINE;
    while Instant::now() < end {
        if ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("timed out waiting for {what}").into())
}

#[tokio::test]
async fn raw_watch_replays_from_a_resource_version_and_bookmarks() -> R {
    let fake = FakeKube::start_with(Config {
        bookmark_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client()?, "default");
    let first = cms.create(&PostParams::default(), &cm("a", "web")).await?;
    let rv = first.metadata.resource_version.clone().ok_or("no rv")?;
    cms.create(&PostParams::default(), &cm("b", "web")).await?;
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await?;
    cms.delete("b", &DeleteParams::default()).await?;

    let mut stream = cms.watch(&WatchParams::default(), &rv).await?.boxed();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let ev = timeout(DEADLINE, stream.next())
            .await?
            .ok_or("stream ended")??;
        seen.push(match ev {
            WatchEvent::Added(c) => format!("ADDED {}", c.metadata.name.unwrap_or_default()),
            WatchEvent::Modified(c) => format!("MODIFIED {}", c.metadata.name.unwrap_or_default()),
            WatchEvent::Deleted(c) => format!("DELETED {}", c.metadata.name.unwrap_or_default()),
            WatchEvent::Bookmark(_) => "BOOKMARK".into(),
            WatchEvent::Error(e) => return Err(format!("error event {e:?}").into()),
        });
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED a", "DELETED b", "BOOKMARK"]);

    // A compacted history: the stream starts with a 410 ERROR.
    fake.compact();
    let mut old = cms.watch(&WatchParams::default(), &rv).await?.boxed();
    match timeout(DEADLINE, old.next())
        .await?
        .ok_or("stream ended")??
    {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => return Err(format!("expected 410, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn reflector_follows_changes_selectors_and_survives_compaction() -> R {
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("a", "web")).await?;
    cms.create(&PostParams::default(), &cm("b", "db")).await?;

    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().labels("tier=web")),
    )
    .default_backoff()
    .applied_objects();
    let task = tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        while s.next().await.is_some() {}
    });
    let names = move || {
        let mut n: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        n.sort();
        n
    };
    let n = names.clone();
    eventually("initial list", move || n() == ["a"]).await?;

    // Starts matching: appears; stops matching: leaves.
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
    )
    .await?;
    let n = names.clone();
    eventually("b relabelled in", move || n() == ["a", "b"]).await?;
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}})),
    )
    .await?;
    let n = names.clone();
    eventually("a relabelled out", move || n() == ["b"]).await?;

    // After compaction the watcher's next resume gets 410 and relists; changes keep flowing.
    fake.compact();
    cms.create(&PostParams::default(), &cm("c", "web")).await?;
    let n = names.clone();
    eventually("c after compaction", move || n() == ["b", "c"]).await?;
    task.abort();
    Ok(())
}

#[tokio::test]
async fn watch_of_all_namespaces_and_cluster_scoped_types() -> R {
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let all: Api<ConfigMap> = Api::all(client.clone());
    let mut stream = watcher(all, watcher::Config::default())
        .applied_objects()
        .boxed();
    for ns in ["x", "y"] {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &cm("a", "web"))
            .await?;
    }
    let mut got = Vec::new();
    while got.len() < 2 {
        let c = timeout(DEADLINE, stream.next()).await?.ok_or("ended")??;
        got.push(c.metadata.namespace.unwrap_or_default());
    }
    got.sort();
    assert_eq!(got, ["x", "y"]);

    let nodes: Api<Node> = Api::all(client);
    let mut ns = watcher(
        nodes.clone(),
        watcher::Config::default().fields("metadata.name=n2"),
    )
    .applied_objects()
    .boxed();
    for n in ["n1", "n2"] {
        let mut node = Node::default();
        node.metadata.name = Some(n.into());
        nodes.create(&PostParams::default(), &node).await?;
    }
    let first = timeout(DEADLINE, ns.next()).await?.ok_or("ended")??;
    assert_eq!(first.metadata.name.as_deref(), Some("n2"));
    Ok(())
}

#[tokio::test]
async fn recorder_events_are_visible_to_the_test() -> R {
    let fake = FakeKube::start().await?;
    let client = fake.client()?;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    let n = nodes.create(&PostParams::default(), &n).await?;
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some("test".into()),
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "InstanceNotFound".into(),
        note: Some("no server named n1".into()),
        action: "InitializeNode".into(),
        secondary: None,
    };
    recorder.publish(&ev, &n.object_ref(&())).await?;
    // The same event again is a series (a merge patch of the first).
    recorder.publish(&ev, &n.object_ref(&())).await?;
    let events = fake.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (
            e.reason.as_str(),
            e.type_.as_str(),
            e.regarding_name.as_deref(),
            e.regarding_kind.as_deref()
        ),
        ("InstanceNotFound", "Warning", Some("n1"), Some("Node"))
    );
    assert_eq!(e.namespace, "default");
    assert_eq!(e.count, 2);
    assert_eq!(e.reporting_controller.as_deref(), Some("kos-ccm"));
    Ok(())
}
