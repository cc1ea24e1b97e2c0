//! kos-ccm's RBAC: the ClusterRole and Role of its manifest (kos-bootstrap's `kos-ccm.yaml`) grant
//! exactly the calls `kos_ccm::rbac::calls()` lists, and kos-ccm run as its ServiceAccount against
//! kos-kube-fake (which authorises as kube-apiserver's RBAC does) with that RBAC initialises a node
//! and gives a Service a load balancer, making no call outside the table; with one rule taken
//! away it is refused (403) and the node stays uninitialised.

mod support;
use support::{DEADLINE, R, initialised, kubelet_node, wait_for};

use std::collections::BTreeSet;

use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kos_ccm::options::RunArgs;
use kos_ccm::rbac::{ApiCall, Scope};
use kos_cloud::{Env, RetryPolicy};
use kos_kube_fake::FakeKube;
use kos_sim::{Sim, SimConfig};
use serde_json::Value;
use tokio::sync::oneshot;

const MANIFEST: &str = include_str!("../../kos-bootstrap/src/addons/kos-ccm.yaml");
const UPSTREAM: &str = include_str!("../../kos-bootstrap/src/addons/ccm.yaml");
const SA: &str = "system:serviceaccount:kube-system:cloud-controller-manager";

fn docs(manifest: &str) -> Vec<Value> {
    let text = manifest
        .replace("@CLUSTER_NAME@", "prod")
        .replace("@CCM_IMAGE@", "example/ccm:1");
    serde_saphyr::from_multiple(&text).expect("YAML documents")
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// One granted (or needed) permission: (scope, group, resource, verb, name or "").
type Grant = (String, String, String, String, String);

fn scope_name(s: Scope) -> String {
    match s {
        Scope::Cluster => "cluster".into(),
        Scope::LeaderElection => "kube-system".into(),
    }
}

fn needed() -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for c in kos_ccm::rbac::calls() {
        for v in c.verbs {
            let names: Vec<&str> = if c.names.is_empty() {
                vec![""]
            } else {
                c.names.to_vec()
            };
            for n in names {
                out.insert((
                    scope_name(c.scope),
                    c.group.to_owned(),
                    c.resource.to_owned(),
                    (*v).to_owned(),
                    n.to_owned(),
                ));
            }
        }
    }
    out
}

/// The rules of the ClusterRoles and Roles bound to the CCM's ServiceAccount, expanded.
fn granted(manifest: &[Value]) -> BTreeSet<Grant> {
    let bound = |kind: &str, name: &str| {
        manifest.iter().any(|d| {
            d["kind"] == format!("{kind}Binding")
                && d["roleRef"]["kind"] == kind
                && d["roleRef"]["name"] == name
                && d["subjects"].as_array().into_iter().flatten().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == "cloud-controller-manager"
                        && s["namespace"] == "kube-system"
                })
        })
    };
    let mut out = BTreeSet::new();
    for d in manifest {
        let kind = d["kind"].as_str().unwrap_or_default();
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let scope = match kind {
            "ClusterRole" => "cluster".to_owned(),
            "Role" => d["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            _ => continue,
        };
        assert!(
            bound(kind, name),
            "{kind} {name} is bound to the CCM's ServiceAccount"
        );
        for rule in d["rules"].as_array().into_iter().flatten() {
            let names = strs(&rule["resourceNames"]);
            let names = if names.is_empty() {
                vec![String::new()]
            } else {
                names
            };
            for g in strs(&rule["apiGroups"]) {
                for r in strs(&rule["resources"]) {
                    for v in strs(&rule["verbs"]) {
                        for n in &names {
                            out.insert((scope.clone(), g.clone(), r.clone(), v.clone(), n.clone()));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_manifest_grants_exactly_what_kos_ccm_calls() {
    let manifest = docs(MANIFEST);
    let ds = manifest
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    assert_eq!(
        ds["spec"]["template"]["spec"]["serviceAccountName"],
        "cloud-controller-manager"
    );
    let granted = granted(&manifest);
    let needed = needed();
    let missing: Vec<_> = needed.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty(),
        "kos-ccm calls what its role does not grant: {missing:#?}"
    );
    assert!(
        extra.is_empty(),
        "its role grants what kos-ccm never calls: {extra:#?}"
    );
    // What the issue found granted: none of it is.
    for (_, _, r, _, _) in &granted {
        assert!(
            ![
                "secrets",
                "serviceaccounts",
                "serviceaccounts/token",
                "configmaps",
                "endpoints"
            ]
            .contains(&r.as_str()),
            "{r}"
        );
    }
}

/// The upstream manifest kos renders for `ccm: upstream` is upstream's role plus what kos-ccm
/// needs beyond it, so that switching its image to kos-ccm is all a switch takes.
#[test]
fn the_upstream_manifest_grants_at_least_what_kos_ccm_calls() {
    let manifest = docs(UPSTREAM);
    let granted = granted(&manifest);
    let covers = |(scope, g, r, v, n): &Grant| {
        granted.iter().any(|(s2, g2, r2, v2, n2)| {
            (s2 == "cluster" || s2 == scope)
                && (g2 == "*" || g2 == g)
                && (r2 == "*" || r2 == r)
                && (v2 == "*" || v2 == v)
                && (n2.is_empty() || n2 == n)
        })
    };
    let missing: Vec<_> = needed().into_iter().filter(|n| !covers(n)).collect();
    assert!(missing.is_empty(), "{missing:#?}");
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

struct World {
    sim: Sim,
    fake: FakeKube,
    dir: tempfile::TempDir,
    env: Env,
    network: String,
}

/// kos-kube-fake with the manifest's ServiceAccount and RBAC applied (as kubectl would), kos-sim
/// with a nodes network, and cloud.conf and a kubeconfig with the ServiceAccount's token on disk.
async fn world(manifest: &[Value]) -> R<World> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let fake = FakeKube::start().await?;
    let mut ns = Namespace::default();
    ns.metadata.name = Some("kube-system".into());
    fake.insert(&ns)?;
    for d in manifest.iter().filter(|d| d["kind"] != "DaemonSet") {
        fake.apply_json(d, "kubectl")?;
    }
    let dir = tempfile::tempdir()?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let s = support::connect(&sim, dir.path(), RetryPolicy::default()).await?;
    let public = s.network().external_network(None).await?.id;
    let (network, subnet, _) = support::node_network(&s, "10.1.0.0/24", Some(&public)).await;
    let c = sim.config();
    std::fs::write(
        dir.path().join("cloud.conf"),
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\nregion = {}\n\n[LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {public}\n",
            sim.auth_url(),
            c.username,
            c.password,
            c.project,
            c.region,
        ),
    )?;
    let token = fake.service_account_token("kube-system", "cloud-controller-manager")?;
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: ccm\nusers:\n- name: ccm\n  user:\n    token: {token}\ncurrent-context: fake\n",
            fake.url()
        ),
    )?;
    Ok(World {
        sim,
        fake,
        dir,
        env,
        network,
    })
}

type Running = (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), kos_ccm::run::RunError>>,
);

fn start(w: &World) -> R<Running> {
    let argv = [
        "kos-ccm".to_owned(),
        format!(
            "--cloud-config={}",
            w.dir.path().join("cloud.conf").display()
        ),
        format!("--kubeconfig={}", w.dir.path().join("kubeconfig").display()),
        "--cluster-name=prod".to_owned(),
        "--secure-port=0".to_owned(),
        "--node-status-update-frequency=1s".to_owned(),
        "--node-monitor-period=500ms".to_owned(),
    ];
    let opts = Cli::try_parse_from(argv)?.run.check()?;
    let env = w.env.clone();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        kos_ccm::run::run(opts, &env, async {
            let _ = rx.await;
        })
        .await
    });
    Ok((tx, task))
}

async fn server(w: &World, name: &str) -> R<String> {
    let s = support::connect(&w.sim, w.dir.path(), RetryPolicy::default()).await?;
    support::active_server(&s, &w.network, name).await
}

/// Whether the table allows a logged request.
fn in_table(r: &kos_kube_fake::Request, calls: &[ApiCall]) -> bool {
    let resource = match (&r.resource, &r.subresource) {
        (Some(res), Some(sub)) => format!("{res}/{sub}"),
        (Some(res), None) => res.clone(),
        _ => return true, // discovery
    };
    let verb = format!("{:?}", r.verb).to_lowercase();
    calls.iter().any(|c| {
        c.group == r.group.as_deref().unwrap_or_default()
            && c.resource == resource
            && c.verbs.contains(&verb.as_str())
            && (c.names.is_empty() || r.name.as_deref().is_some_and(|n| c.names.contains(&n)))
            && match c.scope {
                Scope::Cluster => true,
                Scope::LeaderElection => r.namespace.as_deref() == Some("kube-system"),
            }
    })
}

#[tokio::test]
async fn as_its_service_account_kos_ccm_initialises_nodes_and_balances_services() -> R {
    let w = world(&docs(MANIFEST)).await?;
    let id = server(&w, "node-a").await?;
    w.fake.insert(&kubelet_node("node-a"))?;
    let (stop, task) = start(&w)?;
    let node = wait_for("node-a initialised", || initialised(&w.fake, "node-a")).await?;
    assert_eq!(
        node.spec.and_then(|s| s.provider_id),
        Some(format!("openstack:///{id}"))
    );
    w.fake.insert(&support::web_service())?;
    wait_for("the Service's address", || {
        Ok(w.fake
            .get::<Service>(Some("default"), "web")?
            .and_then(|s| s.status)
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|i| i.into_iter().next())
            .and_then(|i| i.ip))
    })
    .await?;
    let _ = stop.send(());
    let result = tokio::time::timeout(DEADLINE, task).await??;
    assert!(result.is_ok(), "{result:?}");

    // Every request was the ServiceAccount's, allowed, and one the table lists.
    let calls = kos_ccm::rbac::calls();
    let log = w.fake.requests();
    let ours: Vec<_> = log
        .iter()
        .filter(|r| r.user.as_deref() == Some(SA))
        .collect();
    assert!(ours.len() > 5, "{log:#?}");
    let refused: Vec<_> = ours.iter().filter(|r| r.status == 403).collect();
    assert!(refused.is_empty(), "{refused:#?}");
    let unlisted: Vec<_> = ours.iter().filter(|r| !in_table(r, &calls)).collect();
    assert!(
        unlisted.is_empty(),
        "calls missing from kos_ccm::rbac: {unlisted:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_rule_taken_away_is_a_403_and_the_node_stays_uninitialised() -> R {
    // The ClusterRole without `patch` on nodes: initialisation is refused.
    let mut manifest = docs(MANIFEST);
    let role = manifest
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRole")
        .ok_or("no ClusterRole")?;
    let rules = role["rules"].as_array_mut().ok_or("no rules")?;
    for rule in rules.iter_mut() {
        if strs(&rule["resources"]) == ["nodes"] {
            let verbs: Vec<Value> = strs(&rule["verbs"])
                .into_iter()
                .filter(|v| v != "patch")
                .map(Value::from)
                .collect();
            rule["verbs"] = Value::Array(verbs);
        }
    }
    let w = world(&manifest).await?;
    server(&w, "node-a").await?;
    w.fake.insert(&kubelet_node("node-a"))?;
    let (stop, task) = start(&w)?;
    let denied = wait_for("a refused patch of node-a", || {
        Ok(w.fake.requests().into_iter().find(|r| {
            r.status == 403 && r.method == "PATCH" && r.name.as_deref() == Some("node-a")
        }))
    })
    .await?;
    assert_eq!(denied.user.as_deref(), Some(SA));
    assert_eq!(denied.subresource, None);
    assert!(initialised(&w.fake, "node-a")?.is_none());
    let _ = stop.send(());
    let _ = tokio::time::timeout(DEADLINE, task).await?;
    Ok(())
}
