//! The operator's controller against kos-kube-fake as the management cluster and kos-sim (its
//! servers running kos's user_data) as the cloud: a Cluster applied becomes Ready with its
//! secrets in Secrets it owns; a Cluster kos refuses is Degraded with kos's own message and
//! nothing is made in the cloud; a Cluster of a name another namespace's Cluster has in the same
//! cloud project is refused and its deletion tears nothing down; a deleted Cluster is torn down
//! before it goes.

mod support;
use support::{example, tagged};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kos_operator::reconcile::{self, Settings};
use kos_operator::resource::Cluster;
use kos_sim::{Sim, SimConfig};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use serde_json::{Value, json};

fn cluster(name: &str, spec: &Value) -> Value {
    cluster_in("default", name, spec)
}

fn cluster_in(namespace: &str, name: &str, spec: &Value) -> Value {
    let mut spec = spec.clone();
    spec["identityRef"] = json!({"name": "cloud", "cloudName": "sim"});
    json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

fn condition<'a>(c: &'a Cluster, kind: &str) -> Option<&'a kos_operator::resource::Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.kind == kind)
}

/// Waits (bounded, so a hang fails rather than blocks) until `done` holds for the Cluster.
async fn until(
    api: &Api<Cluster>,
    name: &str,
    what: &str,
    done: impl Fn(Option<&Cluster>) -> bool,
) {
    for _ in 0..(std::env::var("KOS_WAIT_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1200))
    {
        let c = api.get_opt(name).await.expect("get");
        if done(c.as_ref()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let c = api.get_opt(name).await.expect("get");
    panic!("{name}: never {what}: {c:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusters_are_made_refused_and_torn_down_by_the_controller() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kos_operator=debug,kube_runtime=info,warn")
        .with_test_writer()
        .try_init();
    let (sim, fake, client) = support::controller_world().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let reference = support::create_identity(&secrets, &sim).await;
    // Another team's namespace, with a credential for the same cloud project.
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-b"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    support::create_identity(&Api::namespaced(client.clone(), "team-b"), &sim).await;

    let ctx = support::context(
        &client,
        &sim,
        Settings {
            retry: Duration::from_secs(1),
            ..Settings::default()
        },
    );
    let api: Api<Cluster> = Api::all(client.clone());
    let controller = tokio::spawn(
        Controller::new(api, kube::runtime::watcher::Config::default())
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|_| async {}),
    );
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "default");
    let apply = PatchParams::apply("test");

    // A spec kos refuses that the CRD cannot (a label key: a schema cannot bound a key's length,
    // so no rule reads keys): Degraded with the message `kos plan` gives, and nothing in the cloud.
    let long = "refused";
    let mut bad_label = example("minimal.yaml")["spec"].clone();
    bad_label["nodePools"][0]["labels"] = json!({"-tier": "web"});
    clusters
        .patch(long, &apply, &Patch::Apply(cluster(long, &bad_label)))
        .await
        .expect("apply");
    until(&clusters, long, "Degraded", |c| {
        c.and_then(|c| condition(c, "Degraded"))
            .is_some_and(|d| d.status == "True")
    })
    .await;
    let refused = clusters.get(long).await.expect("get");
    let degraded = condition(&refused, "Degraded").expect("degraded");
    assert_eq!(degraded.reason, "SpecInvalid");
    let text = serde_json::to_string(&cluster(long, &bad_label)).expect("json");
    let kos_says = kos_cluster::load("x", &text).expect_err("refused");
    // (kos's reader also refuses the Cluster's own metadata.namespace: not a cluster document's.)
    let first = kos_says
        .errors()
        .find(|d| d.field.starts_with("spec.nodePools[0].labels"))
        .expect("the label key refused");
    assert!(
        degraded.message.contains(&first.message),
        "{} / {}",
        degraded.message,
        first.message
    );
    assert_eq!(tagged(&sim, long).await, 0);

    // A valid one becomes Ready.
    clusters
        .patch(
            "demo",
            &apply,
            &Patch::Apply(cluster("demo", &example("minimal.yaml")["spec"])),
        )
        .await
        .expect("apply");
    until(&clusters, "demo", "Progressing", |c| {
        c.and_then(|c| condition(c, "Progressing"))
            .is_some_and(|p| p.status == "True")
    })
    .await;
    // The same name in another namespace and the same cloud project, which knows clusters by name
    // alone: refused while default/demo has it, never a second owner of its servers.
    let team_b: Api<Cluster> = Api::namespaced(client.clone(), "team-b");
    team_b
        .patch(
            "demo",
            &apply,
            &Patch::Apply(cluster_in(
                "team-b",
                "demo",
                &example("minimal.yaml")["spec"],
            )),
        )
        .await
        .expect("apply");
    until(&team_b, "demo", "Degraded", |c| {
        c.and_then(|c| condition(c, "Degraded"))
            .is_some_and(|d| d.status == "True")
    })
    .await;
    let taken = team_b.get("demo").await.expect("get");
    let degraded = condition(&taken, "Degraded").expect("degraded");
    assert_eq!(degraded.reason, "NameTaken", "{}", degraded.message);
    assert!(
        degraded.message.contains("Cluster default/demo"),
        "{}",
        degraded.message
    );
    until(&clusters, "demo", "Ready", |c| {
        c.and_then(|c| condition(c, "Ready"))
            .is_some_and(|r| r.status == "True")
    })
    .await;
    let demo = clusters.get("demo").await.expect("get");
    let status = demo.status.as_ref().expect("status");
    assert_eq!(status.kubernetes_version.as_deref(), Some("1.36.4"));
    assert!(
        status
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("https://"))
    );
    assert_eq!(status.observed_generation, demo.metadata.generation);
    let state = secrets.get("demo-kos").await.expect("state secret");
    let data = state.data.as_ref().expect("data");
    assert!(
        data.contains_key("pki.json") && data.contains_key("cluster.json"),
        "{:?}",
        data.keys()
    );
    let owner = &state.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.uid, demo.metadata.uid.clone().expect("uid"));
    let kc = secrets.get("demo-kubeconfig").await.expect("kubeconfig");
    assert!(kc.data.as_ref().is_some_and(|d| d.contains_key("value")));
    let events = fake.events();
    for reason in ["Applying", "Applied", "Bootstrapping", "ApiReady"] {
        assert!(
            events
                .iter()
                .any(|e| e.reason == reason && e.type_ == "Normal"),
            "no {reason} Event: {events:?}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e.reason == "SpecInvalid" && e.type_ == "Warning"),
        "{events:?}"
    );
    assert!(
        !status.nodes.is_empty() && status.nodes.iter().all(|n| n.phase == "Done"),
        "{:?}",
        status.nodes
    );
    // A resync of the Ready cluster lists its servers once and reads no console: the consoles its
    // turns saw done are remembered (before, every resync listed the servers again to follow them
    // and read each one's console). One turn, called here with the controller stopped.
    controller.abort();
    let _ = controller.await;
    assert_eq!(ctx.finished_consoles(), 3, "minimal.yaml's three servers");
    // The operator's own calls, as its session counts them (the simulated cluster's CCM calls the
    // cloud too).
    let session = kos_operator::identity::connect(&secrets, "default", &reference, ctx.sessions())
        .await
        .expect("the operator's session");
    let before = session.session.counters();
    let demo = Arc::new(clusters.get("demo").await.expect("get"));
    reconcile::reconcile(demo, ctx.clone())
        .await
        .expect("resync");
    let calls = session.session.counters().since(&before);
    let compute = kos_cloud::ServiceKind::Compute;
    assert_eq!(calls.operation(compute, "server.list"), 1, "{calls:?}");
    assert_eq!(
        calls.operation(compute, "server.console_output"),
        0,
        "{calls:?}"
    );
    let lists: Vec<_> = calls
        .by_operation
        .iter()
        .filter(|((_, op), n)| op.ends_with(".list") && **n > 1)
        .collect();
    assert!(lists.is_empty(), "listed more than once: {lists:?}");

    // The CCM credential, mended by the operator itself: no one else keeps the cluster's secrets.
    // Before, both cases below left the Cluster Degraded for good, asking for `kos rotate
    // credential`, a CLI command with no files to run on.
    // 1. Its secret lost from the state Secret while the servers use it: rotated.
    let first_id = ccm_credentials(&sim).await;
    assert_eq!(first_id.len(), 1, "{first_id:?}");
    assert_eq!(
        stored_credential_id(&secrets).await.as_deref(),
        Some(first_id[0].as_str())
    );
    let mut lost = secrets.get("demo-kos").await.expect("state secret");
    lost.data
        .as_mut()
        .expect("data")
        .remove("ccm-credential.json");
    secrets
        .replace("demo-kos", &PostParams::default(), &lost)
        .await
        .expect("lose the credential's secret");
    reconcile::reconcile(
        Arc::new(clusters.get("demo").await.expect("get")),
        ctx.clone(),
    )
    .await
    .expect("mended");
    let second_id = ccm_credentials(&sim).await;
    assert_eq!(second_id.len(), 1, "{second_id:?}");
    assert_ne!(second_id, first_id, "the credential was not rotated");
    assert_eq!(
        stored_credential_id(&secrets).await.as_deref(),
        Some(second_id[0].as_str())
    );
    // 2. A rotation stopped after the new credential went live (as by a leader killed there, here
    // by Keystone refusing the old one's deletion): finished by the next turn.
    let admin = reqwest::Client::new();
    let base = sim.base_url();
    let at = (time::OffsetDateTime::now_utc() - time::Duration::days(1))
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a time");
    let r = admin
        .post(format!(
            "{base}/_sim/app-credentials/{}/expiry",
            second_id[0]
        ))
        .json(&json!({"expires_at": at}))
        .send()
        .await
        .expect("expire");
    assert_eq!(r.status().as_u16(), 204);
    let r = admin
        .post(format!("{base}/_sim/faults"))
        .json(&json!({"method": "DELETE", "path": "application_credentials/", "status": 403}))
        .send()
        .await
        .expect("fault");
    assert_eq!(r.status().as_u16(), 201);
    let _ = reconcile::reconcile(
        Arc::new(clusters.get("demo").await.expect("get")),
        ctx.clone(),
    )
    .await;
    let both = ccm_credentials(&sim).await;
    assert_eq!(both.len(), 2, "the rotation did not stop midway: {both:?}");
    let r = admin
        .delete(format!("{base}/_sim/faults"))
        .send()
        .await
        .expect("faults");
    assert!(r.status().is_success());
    reconcile::reconcile(
        Arc::new(clusters.get("demo").await.expect("get")),
        ctx.clone(),
    )
    .await
    .expect("finished");
    let last = ccm_credentials(&sim).await;
    assert_eq!(last.len(), 1, "{last:?}");
    assert!(
        both.contains(&last[0]) && last != second_id,
        "{both:?} {last:?}"
    );
    assert_eq!(
        stored_credential_id(&secrets).await.as_deref(),
        Some(last[0].as_str())
    );
    let demo = clusters.get("demo").await.expect("get");
    assert_eq!(
        condition(&demo, "Ready").map(|r| r.status.as_str()),
        Some("True"),
        "{:?}",
        demo.status
    );
    let controller = tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|_| async {}),
    );
    let made = tagged(&sim, "demo").await;
    assert!(made > 0);
    assert_eq!(
        condition(&team_b.get("demo").await.expect("get"), "Degraded").map(|d| d.reason.as_str()),
        Some("NameTaken")
    );
    assert!(
        Api::<Secret>::namespaced(client.clone(), "team-b")
            .get_opt("demo-kos")
            .await
            .expect("get")
            .is_none_or(|s| s.data.is_none_or(|d| !d.contains_key("pki.json"))),
        "team-b/demo made secrets"
    );
    // Deleting it tears down nothing of default/demo's.
    team_b
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete");
    until(&team_b, "demo", "deleted", |c| c.is_none()).await;
    assert_eq!(tagged(&sim, "demo").await, made);
    assert_eq!(
        condition(&clusters.get("demo").await.expect("get"), "Ready").map(|r| r.status.as_str()),
        Some("True")
    );

    // Deleted: torn down as `kos down` does, then gone.
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete");
    until(&clusters, "demo", "deleted", |c| c.is_none()).await;
    assert_eq!(tagged(&sim, "demo").await, 0);
    controller.abort();
}

/// The ids of cluster demo's CCM credentials in the simulated Keystone.
async fn ccm_credentials(sim: &Sim) -> Vec<String> {
    let state: Value = reqwest::get(format!("{}/_sim/state", sim.base_url()))
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    let mut ids: Vec<String> = state["keystone"]["app_creds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kos-demo-ccm"))
        })
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    ids
}

/// The id of the CCM credential the state Secret `demo-kos` keeps.
async fn stored_credential_id(secrets: &Api<Secret>) -> Option<String> {
    let state = secrets.get("demo-kos").await.expect("state secret");
    let bytes = state.data?.remove("ccm-credential.json")?;
    let v: Value = serde_json::from_slice(&bytes.0).expect("json");
    v["id"].as_str().map(str::to_owned)
}

/// A reconcile whose identity Secret is unchanged reuses the cloud session (no new token, no
/// discovery again); a changed Secret (a rotated credential) opens a new one.
#[tokio::test]
async fn a_session_is_reused_until_its_identity_secret_changes() {
    let sim = Sim::start(SimConfig::fast()).await.expect("sim");
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    let secrets: Api<Secret> = Api::namespaced(fake.client().expect("client"), "default");
    let reference = support::create_identity(&secrets, &sim).await;
    let sessions = kos_operator::identity::Sessions::default();
    let connect = || kos_operator::identity::connect(&secrets, "default", &reference, &sessions);
    let first = connect().await.expect("connect");
    let again = connect().await.expect("connect");
    assert!(
        Arc::ptr_eq(&first, &again),
        "a second session for the same Secret"
    );
    secrets
        .patch(
            "cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rotated": "1"}}})),
        )
        .await
        .expect("change");
    let after = connect().await.expect("connect");
    assert!(
        !Arc::ptr_eq(&first, &after),
        "the changed Secret's session was the old one"
    );
}
