//! Issue 23's health checks under the operator, on by default: a Cluster's nodes are judged by
//! their group's `healthCheck` at every turn, on the cloud's clock (kos-sim's servers keep it).
//! Three of five workers stopped behind kos's back, at `maxUnhealthy: 40%`, are left alone with a
//! RepairHeld Event (a partition must not replace half a pool); once two are back, the one left
//! NotReady past its timeout is replaced, with an Event saying why, and the Cluster is Ready on
//! its five workers.

mod support;
use support::{SimReach, example};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kos_cloud::model::TagQuery;
use kos_operator::reconcile::{self, Context, Settings};
use kos_operator::resource::Cluster;
use kos_sim::Sim;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::Controller;
use kube::runtime::events::Reporter;
use serde_json::{Value, json};

/// Waits (bounded: a hang fails) until `done` gives something.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut done: impl FnMut() -> F,
) -> T {
    for _ in 0..480 {
        if let Some(t) = done().await {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("never {what}");
}

/// The workers' names and whether each is Ready, as the simulated cluster shows them.
async fn readiness(sim: &Sim) -> Vec<(String, bool)> {
    let clusters: Value = reqwest::get(format!("{}/_sim/clusters", sim.base_url()))
        .await
        .expect("clusters")
        .json()
        .await
        .expect("json");
    clusters[0]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let name = n["name"].as_str()?;
            name.contains("-workers-")
                .then(|| (name.to_owned(), n["ready"] == true))
        })
        .collect()
}

/// The ids of servers `kos-demo-workers-0..3` (`None`: not there, being made again).
async fn worker_ids(session: &kos_cloud::Session) -> Vec<Option<String>> {
    let servers = session
        .compute()
        .list_servers(&TagQuery::default())
        .await
        .expect("servers");
    (0..3)
        .map(|i| {
            let name = format!("kos-demo-workers-{i}");
            servers
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.id.clone())
        })
        .collect()
}

/// Whether Cluster `demo` is Ready.
async fn cluster_ready(clusters: &Api<Cluster>) -> Option<()> {
    let c = clusters.get_opt("demo").await.ok()??;
    c.status?
        .conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True")
        .then_some(())
}

/// A change to the Cluster's metadata: the controller looks at it (a resync would).
async fn poke(clusters: &Api<Cluster>, n: &str) {
    clusters
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": n}}})),
        )
        .await
        .expect("poke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_is_held_and_a_node_notready_past_its_check_is_replaced() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kos_operator=debug,warn")
        .with_test_writer()
        .try_init();
    let (sim, fake, client) = support::controller_world().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let identity = support::create_identity(&secrets, &sim).await;
    let ctx = Arc::new(Context::new(
        client.clone(),
        Arc::new(SimReach(sim.app().clone())),
        Reporter {
            controller: "kos-operator".into(),
            instance: None,
        },
        Settings {
            retry: Duration::from_secs(1),
            // No resync while the test stops servers: a turn that began while a node was still
            // Ready waits for it; the test pokes the Cluster instead.
            resync: Duration::from_secs(600),
            ..Settings::default()
        },
    ));
    let controller = tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|_| async {}),
    );

    let mut spec = example("minimal.yaml")["spec"].clone();
    spec["nodePools"][0]["count"] = json!(5);
    spec["nodePools"][0]["healthCheck"] = json!({"maxUnhealthy": "40%"});
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "default");
    spec["identityRef"] = json!({"name": identity.name, "cloudName": identity.cloud_name});
    let cluster = json!({
        "apiVersion": "kos.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    });
    clusters
        .patch("demo", &PatchParams::apply("test"), &Patch::Apply(cluster))
        .await
        .expect("apply");
    until("Ready on five workers", || async {
        let ready = readiness(&sim).await;
        (ready.len() == 5 && ready.iter().all(|(_, r)| *r)).then_some(())
    })
    .await;
    // Its first turn done: the Cluster is Ready.
    until("the Cluster Ready", || cluster_ready(&clusters)).await;

    // The turn its own status write starts ends too: a turn that began with every node Ready
    // waits for them all (a gap the closing note names).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let session = support::session(&sim).await;
    let stopped: Vec<String> = worker_ids(&session).await.into_iter().flatten().collect();
    assert_eq!(stopped.len(), 3);
    for id in &stopped {
        session.compute().stop_server(id).await.expect("stop");
    }
    until("three workers NotReady", || async {
        let ready = readiness(&sim).await;
        (ready.iter().filter(|(_, r)| !r).count() == 3).then_some(())
    })
    .await;
    // Past the check's five minutes of the cloud's clock (0.3 s here), the operator looks.
    tokio::time::sleep(Duration::from_secs(1)).await;
    poke(&clusters, "1").await;
    let shown = |fake: &kos_kube_fake::FakeKube| {
        fake.events()
            .into_iter()
            .map(|e| format!("{} {}: {}", e.type_, e.reason, e.message))
            .collect::<Vec<_>>()
    };
    let said = tokio::time::timeout(
        Duration::from_secs(120),
        until("the held pool's RepairHeld Event", || async {
            fake.events()
                .into_iter()
                .find(|e| e.reason == "RepairHeld" && e.type_ == "Warning")
                .filter(|e| {
                    e.message.contains(
                    "workers: remediation is not allowed, the number of not started or unhealthy \
                     nodes exceeds maxUnhealthy (total: 5, unhealthy: 3, maxUnhealthy: 2)",
                )
                })
        }),
    )
    .await;
    assert!(said.is_ok(), "no RepairHeld: {:#?}", shown(&fake));
    // Another turn goes by: none replaced a server.
    poke(&clusters, "1b").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        worker_ids(&session)
            .await
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
        stopped,
        "a held server replaced"
    );
    assert!(
        !fake.events().iter().any(|e| e.reason == "Replacing"),
        "{:?}",
        fake.events()
    );

    // Two come back: one of five is within 40 %, and it is replaced.
    for id in &stopped[..2] {
        session.compute().start_server(id).await.expect("start");
    }
    until("one worker NotReady", || async {
        let ready = readiness(&sim).await;
        (ready.iter().filter(|(_, r)| !r).count() == 1).then_some(())
    })
    .await;
    poke(&clusters, "2").await;
    let replacing = until("workers-2 replaced", || async {
        fake.events()
            .into_iter()
            .find(|e| e.reason == "Replacing" && e.message.contains("workers-2"))
    })
    .await;
    assert!(
        replacing.message.contains("NotReady for"),
        "{}",
        replacing.message
    );
    until("Ready on five workers again", || async {
        let ready = readiness(&sim).await;
        let ids = worker_ids(&session).await;
        let made_again = ids[2].as_ref().is_some_and(|id| *id != stopped[2]);
        (ready.len() == 5 && ready.iter().all(|(_, r)| *r) && made_again).then_some(())
    })
    .await;
    let now: Vec<String> = worker_ids(&session).await.into_iter().flatten().collect();
    assert_eq!(now[..2], stopped[..2], "only the one NotReady is replaced");
    // The turn that replaced it ends Ready.
    until("the Cluster Ready again", || cluster_ready(&clusters)).await;
    controller.abort();
}
