//! `kos export` and `kos adopt` through the real binary: a cluster `kos up` made on a served
//! simulated cloud moves under kos-operator (running in this test, kos-kube-fake as the
//! management cluster), is upgraded 1.35 → 1.36 by it with the same CA, and comes back to the CLI,
//! with no server touched by either move.

mod support;
use support::*;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kos_control::connect::{Reach, ReachError, Reaching};
use kos_operator::reconcile::{Context, Settings};
use kos_operator::resource::Cluster;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The served simulator's forwarders to its clusters' APIs, as the CLI finds them.
struct Forwarders(String);

#[derive(Debug, thiserror::Error)]
#[error("the simulated cloud serves no API at {0}")]
struct NotServed(String);

impl Reach for Forwarders {
    fn local_address<'a>(&'a self, ep: &'a kos_bootstrap::ApiEndpoint) -> Reaching<'a> {
        Box::pin(async move {
            let list: Vec<Value> = reqwest::get(format!("{}/_sim/kube-endpoints", self.0))
                .await
                .map_err(|e| ReachError(Box::new(e)))?
                .json()
                .await
                .map_err(|e| ReachError(Box::new(e)))?;
            let want = ep.to_string();
            list.iter()
                .find(|e| e["endpoint"] == want.as_str())
                .and_then(|e| e["local"].as_str()?.parse().ok())
                .map(Some)
                .ok_or_else(|| ReachError(Box::new(NotServed(want))))
        })
    }
}

fn servers(clouds: &std::path::Path, rt: &tokio::runtime::Runtime) -> Vec<String> {
    rt.block_on(async {
        let s = session(clouds).await;
        let mut names: Vec<String> = s
            .compute()
            .list_servers(&kos_cloud::model::TagQuery::all([
                "kos-cluster=demo".to_owned()
            ]))
            .await
            .expect("servers")
            .into_iter()
            .map(|x| x.id)
            .collect();
        names.sort();
        names
    })
}

#[test]
fn a_cli_made_cluster_moves_under_the_operator_is_upgraded_and_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let old = d.join("old.yaml");
    std::fs::write(
        &old,
        std::fs::read_to_string(example("minimal.yaml"))
            .expect("example")
            .replace(
                "kubernetesVersion: \"1.36.4\"",
                "kubernetesVersion: \"1.35.2\"",
            )
            // Behind a load balancer, so the lone control plane can be replaced by a successor:
            // kos refuses to upgrade one reached through a floating IP.
            .replace("type: floatingIP", "type: loadBalancer")
            // Cloud tags travel with the cluster both ways.
            .replace("  name: demo\n", "  name: demo\n  tags: [team=platform]\n"),
    )
    .expect("write");
    let old = old.to_str().expect("utf8");
    let up = kos(d, Some(&sim.clouds), &["up", "-f", old, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let made = servers(&sim.clouds, &rt);
    assert_eq!(made.len(), 3);
    let pki_before =
        std::fs::read_to_string(cluster_dir(d, "sim", "demo").join("pki.json")).expect("pki.json");

    // The management cluster, its CRD and the cloud's credential.
    let fake = rt.block_on(kos_kube_fake::FakeKube::start()).expect("fake");
    let client = rt.block_on(async { fake.client() }).expect("client");
    let clouds_text = std::fs::read_to_string(&sim.clouds).expect("clouds.yaml");
    rt.block_on(async {
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &kos_operator::resource::crd())
            .await
            .expect("crd");
        let identity: Secret = serde_json::from_value(json!({
            "metadata": {"name": "cloud"},
            "stringData": {"clouds.yaml": clouds_text},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &identity)
            .await
            .expect("identity");
    });
    let kubeconfig = d.join("management.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: m\n  cluster:\n    server: {}\ncontexts:\n- name: m\n  context:\n    cluster: m\n    user: admin\nusers:\n- name: admin\n  user: {{}}\ncurrent-context: m\n",
            fake.url()
        ),
    )
    .expect("kubeconfig");
    let kc = kubeconfig.to_str().expect("utf8");

    let export = kos(
        d,
        Some(&sim.clouds),
        &[
            "export",
            "-f",
            old,
            "--cloud",
            "sim",
            "--kubeconfig",
            kc,
            "--identity-secret",
            "cloud",
            "--identity-cloud",
            "sim",
        ],
    );
    assert_eq!(code(&export), 0, "{}", text(&export));
    assert!(
        !cluster_dir(d, "sim", "demo").join("pki.json").exists(),
        "the records left this machine"
    );
    let again = kos(
        d,
        Some(&sim.clouds),
        &[
            "export",
            "-f",
            old,
            "--cloud",
            "sim",
            "--kubeconfig",
            kc,
            "--identity-secret",
            "cloud",
            "--identity-cloud",
            "sim",
        ],
    );
    assert_eq!(code(&again), 3, "nothing left to export: {}", text(&again));

    // The operator takes it, and upgrades it.
    let ctx = Arc::new(Context::new(
        client.clone(),
        Arc::new(Forwarders(sim.base.clone())),
        kube::runtime::events::Reporter {
            controller: "kos-operator".into(),
            instance: None,
        },
        Settings {
            retry: Duration::from_secs(1),
            ..Settings::default()
        },
    ));
    let controller = rt.spawn(
        kube::runtime::Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(
            kos_operator::reconcile::reconcile,
            kos_operator::reconcile::error_policy,
            ctx,
        )
        .for_each(|_| async {}),
    );
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "default");
    let ready = |generation: i64, version: &'static str| {
        let clusters = clusters.clone();
        eventually(
            600,
            &format!("Ready at generation {generation}"),
            move || {
                let c = rt_get(&clusters).ok().flatten()?;
                let s = c.status.as_ref()?;
                let ready = s
                    .conditions
                    .iter()
                    .any(|x| x.kind == "Ready" && x.status == "True");
                (ready
                    && s.observed_generation == Some(generation)
                    && s.kubernetes_version.as_deref() == Some(version))
                .then_some(())
            },
        )
    };
    ready(1, "1.35.2");
    assert_eq!(
        servers(&sim.clouds, &rt),
        made,
        "adopting touched no server"
    );
    rt.block_on(clusters.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"kubernetesVersion": "1.36.4"}})),
    ))
    .expect("upgrade");
    ready(2, "1.36.4");
    let state = rt
        .block_on(Api::<Secret>::namespaced(client.clone(), "default").get("demo-kos"))
        .expect("state");
    let pki = state
        .data
        .as_ref()
        .and_then(|d| d.get("pki.json"))
        .expect("pki");
    assert_eq!(
        String::from_utf8_lossy(&pki.0),
        pki_before,
        "the cluster's CA came along unchanged"
    );
    let list = sim_admin(&sim.base, "/_sim/clusters");
    let list = list.as_array().expect("clusters");
    assert_eq!(list.len(), 1, "one cluster, never a second made: {list:?}");
    assert_eq!(list[0]["violations"], json!([]), "{list:?}");
    assert!(
        list[0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["version"] == "v1.36.4" && n["ready"] == true),
        "{list:?}"
    );
    let upgraded = servers(&sim.clouds, &rt);

    // The operator's records backed up from the CLI: sealed, they open to the Secret's PKI.
    let pass = d.join("passphrase");
    std::fs::write(&pass, "correct horse battery staple\n").expect("passphrase");
    let sealed = d.join("demo-operator.kos-backup");
    let backup = kos(
        d,
        Some(&sim.clouds),
        &[
            "backup",
            "demo",
            "--namespace",
            "default",
            "--kubeconfig",
            kc,
            "--passphrase-file",
            pass.to_str().expect("utf8"),
            "-o",
            sealed.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&backup), 0, "{}", text(&backup));
    let opened = kos_control::backup::open(
        &std::fs::read_to_string(&sealed).expect("backup"),
        &secrecy::SecretString::from("correct horse battery staple".to_owned()),
    )
    .expect("opens");
    let memory = kos_control::store::Memory::default();
    kos_control::backup::restore(&opened, &memory).expect("restore");
    assert_eq!(
        kos_control::store::SecretStore::read(&memory, kos_control::store::Record::Pki)
            .expect("read")
            .expect("pki")
            .expose(),
        pki_before,
        "the backup holds the operator's PKI"
    );

    // And back to the CLI.
    let adopt = kos(
        d,
        Some(&sim.clouds),
        &[
            "adopt",
            "demo",
            "--cloud",
            "sim",
            "--kubeconfig",
            kc,
            "-o",
            "back.yaml",
        ],
    );
    assert_eq!(code(&adopt), 0, "{}", text(&adopt));
    assert!(
        rt_get(&clusters).expect("get").is_none(),
        "the Cluster was let go"
    );
    assert_eq!(
        servers(&sim.clouds, &rt),
        upgraded,
        "letting go tore nothing down"
    );
    controller.abort();
    let plan = kos(
        d,
        Some(&sim.clouds),
        &[
            "plan",
            "-f",
            "back.yaml",
            "--cloud",
            "sim",
            "--detailed-exitcode",
        ],
    );
    assert_eq!(code(&plan), 0, "nothing to do: {}", text(&plan));
    let back: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(d.join("back.yaml")).expect("back.yaml"))
            .expect("yaml");
    assert_eq!(
        back["metadata"]["tags"],
        serde_json::json!(["team=platform"]),
        "{back}"
    );
    let up = kos(
        d,
        Some(&sim.clouds),
        &["up", "-f", "back.yaml", "--cloud", "sim"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    assert_eq!(servers(&sim.clouds, &rt), upgraded);
    drop(fake);
}

/// The Cluster `demo`, read from a thread outside the runtime. An error is returned, not a panic:
/// while a control plane is replaced the API behind the load balancer may answer 504 for a moment,
/// as a real kube-apiserver does when its etcd member is gone.
fn rt_get(clusters: &Api<Cluster>) -> Result<Option<Cluster>, kube::Error> {
    let clusters = clusters.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(clusters.get_opt("demo"))
    })
    .join()
    .expect("thread")
}

/// `kos up --self-hosted`: a cluster `kos up` made keeps itself. `kos export --self-hosted` is
/// refused (nothing moved) while the cluster has no identity Secret, and `kos up --self-hosted`
/// while its identity file does not name the cloud; then the identity is written into the
/// cluster, kos-operator installed there, on its control planes, and the Cluster and its records
/// go there. The operator, run here against the cluster's own API as its pod would be, scales the
/// cluster it runs in, then upgrades it 1.35 → 1.36, its replica's control plane replaced mid-way
/// (the replica drained, killed, another started from nothing) and killed once more at a random
/// moment, no invariant violated; `kos adopt` through the cluster's kubeconfig brings it back to
/// the CLI with nothing to do, and takes the operator and its identity out.
#[test]
fn a_cluster_exported_self_hosted_keeps_itself_and_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = d.join("demo.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(example("minimal.yaml"))
            .expect("example")
            .replace("      count: 2\n", "      count: 1\n")
            // Upgraded by the operator it runs: a lone control plane is replaced by a successor
            // behind a load balancer.
            .replace(
                "kubernetesVersion: \"1.36.4\"",
                "kubernetesVersion: \"1.35.2\"",
            )
            .replace("type: floatingIP", "type: loadBalancer"),
    )
    .expect("write");
    let spec_arg = spec.to_str().expect("utf8");
    let up = kos(
        d,
        Some(&sim.clouds),
        &["up", "-f", spec_arg, "--cloud", "sim"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    let kc = d.join("demo.kubeconfig");
    let o = kos(
        d,
        Some(&sim.clouds),
        &[
            "kubeconfig",
            "demo",
            "--cloud",
            "sim",
            "-o",
            kc.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let made = servers(&sim.clouds, &rt);
    let dir = cluster_dir(d, "sim", "demo");
    let pki_before = std::fs::read_to_string(dir.join("pki.json")).expect("pki.json");

    // The cluster's own API, as kos reaches it (its records, the simulator's forwarders).
    let store = kos_control::store::Memory::default();
    for (record, file) in [
        (kos_control::store::Record::Pki, "pki.json"),
        (kos_control::store::Record::Meta, "cluster.json"),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("record");
        kos_control::store::SecretStore::write(
            &store,
            record,
            &kos_bootstrap::Sensitive::new(text),
        )
        .expect("write");
    }
    let loaded = kos_cluster::load("demo.yaml", &std::fs::read_to_string(&spec).expect("spec"))
        .expect("spec");
    let reach = Forwarders(sim.base.clone());
    let wl = rt.block_on(async {
        let session = session(&sim.clouds).await;
        let cloud = kos_control::connect::Cloud {
            session: &session,
            reach: &reach,
        };
        kos_control::connect::stored_api_client(cloud, &loaded.spec, &store)
            .await
            .expect("the cluster's API")
            .client()
    });
    let export = || {
        kos(
            d,
            Some(&sim.clouds),
            &[
                "export",
                "-f",
                spec_arg,
                "--cloud",
                "sim",
                "--self-hosted",
                "--operator-image",
                "registry.example/kos/kos-operator:0.1.0",
                "--identity-secret",
                "cloud",
                "--identity-cloud",
                "sim",
            ],
        )
    };
    let refused = export();
    assert_eq!(code(&refused), 3, "{}", text(&refused));
    assert!(
        text(&refused).contains("no Secret kos-system/cloud"),
        "{}",
        text(&refused)
    );
    assert!(dir.join("pki.json").exists(), "nothing moved");

    // `kos up --self-hosted` writes the operator's identity into the cluster itself: a file that
    // does not name its cloud is refused before anything.
    let self_host = |cloud: &str, secret: &str| {
        kos(
            d,
            Some(&sim.clouds),
            &[
                "up",
                "-f",
                spec_arg,
                "--cloud",
                "sim",
                "--self-hosted",
                "--operator-image",
                "registry.example/kos/kos-operator:0.1.0",
                "--identity-file",
                sim.clouds.to_str().expect("utf8"),
                "--identity-cloud",
                cloud,
                "--identity-secret",
                secret,
            ],
        )
    };
    let refused = self_host("elsewhere", "cloud");
    assert_eq!(code(&refused), 3, "{}", text(&refused));
    assert!(
        text(&refused).contains("cloud 'elsewhere' not found in --identity-file"),
        "{}",
        text(&refused)
    );
    assert!(dir.join("pki.json").exists(), "nothing moved");
    assert_eq!(servers(&sim.clouds, &rt), made, "nothing made");
    // A Secret kos did not write is never overwritten.
    rt.block_on(async {
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": "kos-system"}})).expect("ns");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(wl.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
        let theirs: Secret = serde_json::from_value(json!({
            "metadata": {"name": "theirs"},
            "stringData": {"clouds.yaml": "clouds: {}"},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(wl.clone(), "kos-system")
            .create(&PostParams::default(), &theirs)
            .await
            .expect("their Secret");
    });
    let refused = self_host("sim", "theirs");
    assert_eq!(code(&refused), 3, "{}", text(&refused));
    assert!(
        text(&refused)
            .contains("Secret kos-system/theirs exists in the cluster and kos did not write it"),
        "{}",
        text(&refused)
    );
    assert!(dir.join("pki.json").exists(), "nothing moved");
    let moved = self_host("sim", "cloud");
    assert_eq!(code(&moved), 0, "{}", text(&moved));
    let identity = rt
        .block_on(Api::<Secret>::namespaced(wl.clone(), "kos-system").get("cloud"))
        .expect("the identity Secret kos wrote");
    assert_eq!(
        String::from_utf8_lossy(&identity.data.expect("data")["clouds.yaml"].0),
        std::fs::read_to_string(&sim.clouds).expect("clouds.yaml")
    );
    assert!(
        !dir.join("pki.json").exists(),
        "the records left this machine"
    );
    let deployment = rt
        .block_on(
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(wl.clone(), "kos-system")
                .get("kos-operator"),
        )
        .expect("the operator's Deployment in the cluster");
    let pod = deployment.spec.template.spec.expect("pod");
    assert_eq!(
        pod.node_selector.expect("placed")["node-role.kubernetes.io/control-plane"],
        ""
    );
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.example/kos/kos-operator:0.1.0")
    );
    let records = rt
        .block_on(Api::<Secret>::namespaced(wl.clone(), "kos-system").get("demo-kos"))
        .expect("records");
    assert_eq!(
        String::from_utf8_lossy(&records.data.expect("data")["pki.json"].0),
        pki_before
    );

    // The operator in the cluster it keeps (a process: started again with nothing of the last).
    let start = || {
        let ctx = Arc::new(Context::new(
            wl.clone(),
            Arc::new(Forwarders(sim.base.clone())),
            kube::runtime::events::Reporter {
                controller: "kos-operator".into(),
                instance: None,
            },
            Settings {
                retry: Duration::from_secs(1),
                ..Settings::default()
            },
        ));
        rt.spawn(
            kube::runtime::Controller::new(
                Api::<Cluster>::all(wl.clone()),
                kube::runtime::watcher::Config::default(),
            )
            .run(
                kos_operator::reconcile::reconcile,
                kos_operator::reconcile::error_policy,
                ctx,
            )
            .for_each(|_| async {}),
        )
    };
    let mut controller = start();
    let clusters: Api<Cluster> = Api::namespaced(wl.clone(), "kos-system");
    let ready_now = |generation: i64, version: &str| {
        let c = rt_get(&clusters).ok().flatten()?;
        let s = c.status.as_ref()?;
        (s.observed_generation == Some(generation)
            && s.kubernetes_version.as_deref() == Some(version)
            && s.conditions
                .iter()
                .any(|x| x.kind == "Ready" && x.status == "True"))
        .then_some(())
    };
    let ready = |generation: i64| {
        eventually(600, &format!("Ready at generation {generation}"), || {
            ready_now(generation, "1.35.2")
        })
    };
    ready(1);
    assert_eq!(
        servers(&sim.clouds, &rt),
        made,
        "taking it over touched no server"
    );
    rt.block_on(
        clusters.patch(
            "demo",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/nodePools/0/count", "value": 2}
                ]))
                .expect("patch"),
            ),
        ),
    )
    .expect("scale");
    ready(2);
    assert_eq!(
        servers(&sim.clouds, &rt).len(),
        made.len() + 1,
        "a worker made"
    );
    let list = sim_admin(&sim.base, "/_sim/clusters");
    let list = list.as_array().expect("clusters");
    assert_eq!(list[0]["violations"], json!([]), "{list:?}");
    assert_eq!(
        list[0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| n["ready"] == true)
            .count(),
        3,
        "{list:?}"
    );

    // It upgrades itself 1.35 → 1.36. Its replica runs on the control plane the upgrade replaces
    // (no simulated kubelet runs a pod: the pod is written as the ReplicaSet and kubelet would);
    // drained, the replica dies and another starts elsewhere, from nothing but what the cloud and
    // the cluster show.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(wl.clone(), "kos-system");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(wl.clone());
    // Written again after a failure (the API may answer 504 while a control plane is replaced):
    // a pod already made is kept, its status set.
    let place = |name: &str, node: &str| -> Result<(), kube::Error> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kos-system",
                         "labels": {"app.kubernetes.io/name": "kos-operator"}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "kos-operator", "image": "registry.example/kos/kos-operator:0.1.0"}]},
        }))
        .expect("pod");
        rt.block_on(async {
            match pods.create(&PostParams::default(), &pod).await {
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                other => {
                    other?;
                }
            }
            pods.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
            )
            .await
            .map(drop)
        })
    };
    place("kos-operator-a", "kos-demo-cp-0").expect("pod");
    rt.block_on(clusters.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"kubernetesVersion": "1.36.4"}})),
    ))
    .expect("upgrade");
    // Besides its eviction, the operator dies once more at a random moment of the upgrade (a
    // crash: the next one starts from nothing). The seed is printed; KOS_KILL_SEED repeats it.
    let seed = std::env::var("KOS_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("cli_fleet: KOS_KILL_SEED={seed}");
    let mut crash_at: u32 = {
        use rand::{Rng as _, SeedableRng as _};
        // Polls are 200 ms apart: within the first minute of the upgrade.
        rand::rngs::StdRng::seed_from_u64(seed).random_range(1..300)
    };
    let mut evicted = false;
    eventually(900, "upgraded by the operator it runs", || {
        if crash_at > 0 {
            crash_at -= 1;
            if crash_at == 0 {
                controller.abort();
                controller = start();
            }
        }
        if !evicted && rt.block_on(pods.get_opt("kos-operator-a")).ok()?.is_none() {
            // Its node drained: this replica is gone; the next starts on another control plane.
            controller.abort();
            let elsewhere = rt
                .block_on(nodes.list(&Default::default()))
                .ok()?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .find(|n| n.starts_with("kos-demo-cp-") && n != "kos-demo-cp-0")?;
            place("kos-operator-b", &elsewhere).ok()?;
            evicted = true;
            controller = start();
        }
        ready_now(3, "1.36.4")
    });
    assert!(evicted, "the operator's own node was never drained");
    let list = sim_admin(&sim.base, "/_sim/clusters");
    let list = list.as_array().expect("clusters");
    assert_eq!(list[0]["violations"], json!([]), "{list:?}");
    assert!(
        list[0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["version"] == "v1.36.4" && n["ready"] == true),
        "{list:?}"
    );

    // Back to the CLI through the cluster's own kubeconfig (the operator in it lets it go).
    let adopt = kos(
        d,
        Some(&sim.clouds),
        &[
            "adopt",
            "demo",
            "--cloud",
            "sim",
            "--kubeconfig",
            kc.to_str().expect("utf8"),
            "--namespace",
            "kos-system",
            "-o",
            "back.yaml",
        ],
    );
    assert_eq!(code(&adopt), 0, "{}", text(&adopt));
    controller.abort();
    // The operator it ran, and the identity kos wrote for it, are out of the cluster.
    let left = rt.block_on(async {
        let deployment =
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(wl.clone(), "kos-system")
                .get_opt("kos-operator")
                .await
                .expect("deployments");
        let secret = Api::<Secret>::namespaced(wl.clone(), "kos-system")
            .get_opt("cloud")
            .await
            .expect("secrets");
        (deployment.is_some(), secret.is_some())
    });
    assert_eq!(left, (false, false), "{}", text(&adopt));
    assert_eq!(
        std::fs::read_to_string(cluster_dir(d, "sim", "demo").join("pki.json")).expect("pki"),
        pki_before,
        "the same CA came back"
    );
    let plan = kos(
        d,
        Some(&sim.clouds),
        &[
            "plan",
            "-f",
            "back.yaml",
            "--cloud",
            "sim",
            "--detailed-exitcode",
        ],
    );
    assert_eq!(code(&plan), 0, "nothing to do: {}", text(&plan));
}
