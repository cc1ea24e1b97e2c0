//! Issue 23's health checks under the operator, on by default: a Cluster's nodes are judged by
//! their group's `healthCheck` at every turn, on the cloud's clock (kos-sim's servers keep it).
//! Three of five workers stopped behind kos's back, at `maxUnhealthy: 40%`, are left alone with a
//! RepairHeld Event (a partition must not replace half a pool); once two are back, the one left
//! NotReady past its timeout is replaced, with an Event saying why, and the Cluster is Ready on
//! its five workers. A worker's server deleted behind kos's back is made again and joins under its
//! Node's name, while a pod on another worker, held by its PodDisruptionBudget, stays where it is.

mod support;
use support::{SimReach, example};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kos_cloud::model::TagQuery;
use kos_operator::reconcile::{self, Settings};
use kos_operator::resource::Cluster;
use kos_sim::Sim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
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

/// `GET /_sim/clusters`: the simulated clusters as the guest runtime knows them.
async fn sim_clusters(sim: &Sim) -> Value {
    reqwest::get(format!("{}/_sim/clusters", sim.base_url()))
        .await
        .expect("clusters")
        .json()
        .await
        .expect("json")
}

/// The workers' names and whether each is Ready, as the simulated cluster shows them.
async fn readiness(sim: &Sim) -> Vec<(String, bool)> {
    let clusters = sim_clusters(sim).await;
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

/// The Cluster's `NodesHealthy` condition (status, reason) and its workers' health, once the
/// status has them.
async fn workers_health(
    clusters: &Api<Cluster>,
) -> Option<((String, String), kos_operator::resource::GroupHealthStatus)> {
    let s = clusters.get_opt("demo").await.ok()??.status?;
    let c = s.conditions.iter().find(|c| c.kind == "NodesHealthy")?;
    let workers = s.health.iter().find(|g| g.group == "workers")?.clone();
    Some(((c.status.clone(), c.reason.clone()), workers))
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
    let ctx = support::context(
        &client,
        &sim,
        Settings {
            retry: Duration::from_secs(1),
            // No resync while the test stops servers: a turn that began while a node was still
            // Ready waits for it; the test pokes the Cluster instead.
            resync: Duration::from_secs(600),
            ..Settings::default()
        },
    );
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
    // The status says it too: which nodes, why, and that they are held.
    let (condition, workers) = until("the status to show the held pool", || async {
        workers_health(&clusters)
            .await
            .filter(|(_, w)| w.unhealthy.len() == 3)
    })
    .await;
    assert_eq!(condition, ("False".into(), "RemediationHeld".into()));
    assert_eq!((workers.expected_nodes, workers.healthy_nodes), (5, 2));
    assert!(!workers.remediation_allowed);
    assert!(
        workers
            .message
            .as_deref()
            .is_some_and(|m| m.contains("maxUnhealthy: 2")),
        "{workers:?}"
    );
    assert!(
        workers.unhealthy[0]
            .reason
            .contains("condition Ready on its Node is reporting status"),
        "{workers:?}"
    );
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
    // The turn that replaced it ends Ready, every node healthy.
    until("the Cluster Ready again", || cluster_ready(&clusters)).await;
    let (condition, workers) = until("the status to show five healthy workers", || async {
        workers_health(&clusters)
            .await
            .filter(|(_, w)| w.healthy_nodes == 5)
    })
    .await;
    assert_eq!(condition, ("True".into(), "Healthy".into()));
    assert!(workers.unhealthy.is_empty() && workers.remediation_allowed);
    controller.abort();
}

/// Node `name` of the simulated cluster: the id of the server its kubelet runs on (`None`: no
/// kubelet of it runs) and whether it is Ready.
async fn node_of(sim: &Sim, name: &str) -> Option<(Option<String>, bool)> {
    let clusters = sim_clusters(sim).await;
    clusters[0]["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == name)
        .map(|n| (n["server"].as_str().map(str::to_owned), n["ready"] == true))
}

/// Worker 0's server deleted through the cloud API: the next turn makes `kos-demo-workers-0` again
/// (a new server id) and it is Ready as Node `kos-demo-workers-0`, the Cluster Ready after; pod
/// `web` on workers-1 under a `minAvailable: 1` budget is never evicted, workers 1 and 2 keep their
/// servers, and the simulated cluster records no invariant violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_workers_server_is_made_again_and_budgets_hold() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kos_operator=debug,warn")
        .with_test_writer()
        .try_init();
    let (sim, fake, client) = support::controller_world().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let identity = support::create_identity(&secrets, &sim).await;
    let ctx = support::context(
        &client,
        &sim,
        Settings {
            retry: Duration::from_secs(1),
            // No resync: the test pokes the Cluster when it wants a turn.
            resync: Duration::from_secs(600),
            ..Settings::default()
        },
    );
    // Each turn's start, once it has ended well.
    let turns: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let log = turns.clone();
    let controller = tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(
            move |c, ctx| {
                let log = log.clone();
                async move {
                    let started = Instant::now();
                    let r = reconcile::reconcile(c, ctx).await;
                    if r.is_ok() {
                        log.lock().expect("turns").push(started);
                    }
                    r
                }
            },
            reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {}),
    );

    // Three workers, the pool's health check its default (on).
    let mut spec = example("minimal.yaml")["spec"].clone();
    spec["nodePools"][0]["count"] = json!(3);
    spec["identityRef"] = json!({"name": identity.name, "cloudName": identity.cloud_name});
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "default");
    let cluster = json!({
        "apiVersion": "kos.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    });
    clusters
        .patch("demo", &PatchParams::apply("test"), &Patch::Apply(cluster))
        .await
        .expect("apply");
    until("Ready on three workers", || async {
        let ready = readiness(&sim).await;
        (ready.len() == 3 && ready.iter().all(|(_, r)| *r)).then_some(())
    })
    .await;
    until("the Cluster Ready", || cluster_ready(&clusters)).await;

    // In the workload cluster: pod `web` on workers-1, and a budget that keeps it.
    let workload = support::workload(&secrets, &SimReach(sim.app().clone())).await;
    let pods: Api<Pod> = Api::namespaced(workload.clone(), "default");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(workload.clone(), "default");
    let nodes: Api<Node> = Api::all(workload.clone());
    let web: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "kos-demo-workers-1",
            "containers": [{"name": "main", "image": "nginx"}],
        },
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &web)
        .await
        .expect("web");
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .expect("budget");
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .expect("budget");
    // No simulated kubelet runs a plain pod: its status is written as its kubelet would report
    // it (a Pending pod ignores budgets; a Running and Ready one counts).
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }})),
    )
    .await
    .expect("web's status");
    let web_uid = until(
        "web Running and Ready, its budget allowing nothing",
        || async {
            let p = pods.get_opt("web").await.ok()??;
            let b = budgets.get_opt("web").await.ok()??.status?;
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
            (running && b.current_healthy == Some(1) && b.disruptions_allowed.unwrap_or(0) == 0)
                .then_some(p.metadata.uid)
                .flatten()
        },
    )
    .await;

    // The turn the Cluster's own status write started ends too (as in the test above).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let session = support::session(&sim).await;
    let before: Vec<String> = worker_ids(&session)
        .await
        .into_iter()
        .map(|id| id.expect("three workers' servers"))
        .collect();
    // The Events there before, by name, with how often each was seen (a repeated one is counted).
    let seen_before: HashMap<String, i64> = fake
        .events()
        .into_iter()
        .map(|e| (e.name, e.count))
        .collect();
    // Behind kos's back: workers-0's server goes.
    session
        .compute()
        .delete_server(&before[0])
        .await
        .expect("delete");
    until("workers-0's server gone", || async {
        (worker_ids(&session).await[0].as_ref() != Some(&before[0])).then_some(())
    })
    .await;
    let poked = Instant::now();
    poke(&clusters, "1").await;
    let remade = until("workers-0 made again, joined and Ready", || async {
        let made = worker_ids(&session).await[0]
            .clone()
            .filter(|id| *id != before[0])?;
        let (server, ready) = node_of(&sim, "kos-demo-workers-0").await?;
        (ready && server.as_ref() == Some(&made)).then_some(made)
    })
    .await;
    // The turn the poke started ends well, and leaves the Cluster Ready (it was before, so only
    // a turn that began after the deletion says anything).
    until("a turn begun after the poke ended", || async {
        let turns = turns.lock().expect("turns");
        turns.iter().any(|t| *t >= poked).then_some(())
    })
    .await;
    assert!(
        cluster_ready(&clusters).await.is_some(),
        "{:#?}",
        clusters.get("demo").await.expect("demo").status
    );

    let events: Vec<String> = fake
        .events()
        .into_iter()
        .filter(|e| seen_before.get(&e.name).is_none_or(|n| *n < e.count))
        .map(|e| format!("{} {}: {} (x{})", e.type_, e.reason, e.message, e.count))
        .collect();
    // Nothing else was touched: web is where it was, never evicted nor deleted (a pod made again
    // would have another uid), and the other workers keep their servers, never cordoned.
    let web = pods.get("web").await.expect("web is still there");
    assert_eq!(
        web.metadata.uid,
        Some(web_uid),
        "web was deleted and made again"
    );
    assert!(web.metadata.deletion_timestamp.is_none(), "web is going");
    assert_eq!(
        web.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("kos-demo-workers-1")
    );
    let now = worker_ids(&session).await;
    assert_eq!(now[0].as_ref(), Some(&remade));
    assert_eq!(
        now[1..]
            .iter()
            .map(|id| id.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        before[1..],
        "another worker's server was replaced"
    );
    for name in ["kos-demo-workers-1", "kos-demo-workers-2"] {
        let node = nodes.get(name).await.expect("node");
        let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        assert!(!cordoned, "{name} was cordoned");
    }
    // No Event of the turn names another worker (no Replacing, Drained, NotDrained of one).
    assert!(
        !events
            .iter()
            .any(|e| e.contains("workers-1") || e.contains("workers-2")),
        "{events:#?}"
    );
    // The simulated cluster's invariants held all along (every violation is recorded).
    let clusters_seen = sim_clusters(&sim).await;
    for c in clusters_seen.as_array().expect("clusters") {
        let violations = c["violations"].as_array().expect("violations");
        assert!(violations.is_empty(), "{}: {violations:#?}", c["name"]);
    }
    controller.abort();
}

/// A node that stops being Ready between turns is seen at once, through the operator's watch on
/// the cluster's Nodes, not at the next resync: with a resync far beyond this test and nothing
/// poking the Cluster, worker 0 stopped behind kos's back is replaced (Event `Replacing`, a new
/// server) and Ready again, worker 1 untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_notready_between_turns_is_replaced_without_waiting_for_the_resync() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kos_operator=debug,warn")
        .with_test_writer()
        .try_init();
    let (sim, fake, client) = support::controller_world().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let identity = support::create_identity(&secrets, &sim).await;
    let ctx = support::context(
        &client,
        &sim,
        Settings {
            retry: Duration::from_secs(1),
            resync: Duration::from_secs(3600),
            ..Settings::default()
        },
    );
    let triggers = ctx.node_watches().triggers();
    let controller = tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .reconcile_on(triggers)
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|_| async {}),
    );
    let mut spec = example("minimal.yaml")["spec"].clone();
    spec["identityRef"] = json!({"name": identity.name, "cloudName": identity.cloud_name});
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "default");
    let cluster = json!({
        "apiVersion": "kos.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    });
    clusters
        .patch("demo", &PatchParams::apply("test"), &Patch::Apply(cluster))
        .await
        .expect("apply");
    until("the Cluster Ready on two workers", || async {
        cluster_ready(&clusters).await?;
        let ready = readiness(&sim).await;
        (ready.len() == 2 && ready.iter().all(|(_, r)| *r)).then_some(())
    })
    .await;
    until("a watch on the cluster's Nodes", || async {
        (ctx.node_watches().running() == 1).then_some(())
    })
    .await;
    // The turns its status writes started end too.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let session = support::session(&sim).await;
    let before = worker_ids(&session).await;
    let stopped = before[0].clone().expect("workers-0");
    session.compute().stop_server(&stopped).await.expect("stop");
    let replacing = until("workers-0 replaced, no poke, no resync", || async {
        fake.events()
            .into_iter()
            .find(|e| e.reason == "Replacing" && e.message.contains("workers-0"))
    })
    .await;
    assert!(
        replacing.message.contains("NotReady for"),
        "{}",
        replacing.message
    );
    until("Ready on two workers again", || async {
        let ready = readiness(&sim).await;
        let ids = worker_ids(&session).await;
        let made_again = ids[0].as_ref().is_some_and(|id| *id != stopped);
        (ready.len() == 2 && ready.iter().all(|(_, r)| *r) && made_again).then_some(())
    })
    .await;
    assert_eq!(
        worker_ids(&session).await[1],
        before[1],
        "workers-1 untouched"
    );
    controller.abort();
}
