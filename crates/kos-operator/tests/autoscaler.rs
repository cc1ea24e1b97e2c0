//! Issue 23's autoscaling: kos-operator's externalgrpc CloudProvider, over mutual TLS, driven as
//! cluster-autoscaler 1.36 drives it (its externalgrpc provider: `Refresh` at each loop, then
//! `NodeGroups`, `NodeGroupForNode` per node, `NodeGroupTargetSize` and `NodeGroupNodes` per group;
//! for a scale-up, `NodeGroupTemplateNodeInfo` of a group with no node and `NodeGroupIncreaseSize`;
//! for a scale-down, `NodeGroupDeleteNodes` of the drained node). A pool at 0 grows to a Ready node
//! with the template's labels and taints, and a scale-down removes exactly the named node: the
//! older of two, where kos alone would take the newest. A scale-up whose server fails to build is
//! given up as the autoscaler does it: the instance reported with its error, then deleted through
//! `NodeGroupDeleteNodes` of the autoscaler's fake node, the target lowered.

#![allow(clippy::unwrap_used)]

mod support;
use support::{SimReach, example};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Secret};
use kos_cloud::model::TagQuery;
use kos_operator::autoscaler::install::{self, Install};
use kos_operator::autoscaler::proto::cloud_provider_client::CloudProviderClient;
use kos_operator::autoscaler::proto::*;
use kos_operator::reconcile::{self, Settings};
use kos_operator::resource::Cluster;
use kos_sim::FaultRule;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::Controller;
use serde_json::json;
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

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

/// A CA, and certificates it signs: `(cert PEM, key PEM)`.
struct Ca {
    pem: String,
    key_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            key_pem: key.serialize_pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn sign(&self, cn: &str, sans: &[&str], client: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// An autoscaler's client, with a certificate of `ca` for `cn`.
async fn dial(
    addr: std::net::SocketAddr,
    server_ca: &Ca,
    ca: &Ca,
    cn: &str,
) -> Result<CloudProviderClient<Channel>, tonic::transport::Error> {
    let (cert, key) = ca.sign(cn, &[], true);
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&server_ca.pem))
        .identity(Identity::from_pem(cert, key))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(CloudProviderClient::new(channel))
}

/// cluster-autoscaler's externalgrpc `cloudConfig`: the keys it reads, and no other.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CloudConfig {
    address: String,
    key: String,
    cert: String,
    cacert: String,
    #[allow(dead_code)]
    grpc_timeout: Option<String>,
}

/// The Secret's key a path under the mount is.
fn key_of<'a>(path: &'a str, mount: &str) -> &'a str {
    path.strip_prefix(mount)
        .and_then(|p| p.strip_prefix('/'))
        .unwrap_or_else(|| panic!("{path} is not under {mount}"))
}

/// The pool's `count` in the Cluster's spec.
async fn count(clusters: &Api<Cluster>) -> u32 {
    let c = clusters.get("demo").await.expect("cluster");
    c.spec.cluster.node_pools.unwrap()[0].count
}

/// The names of servers `kos-demo-workers-*` and whether each is tagged to leave.
async fn workers(session: &kos_cloud::Session) -> Vec<(String, String, bool)> {
    let mut v: Vec<_> = session
        .compute()
        .list_servers(&TagQuery::default())
        .await
        .expect("servers")
        .into_iter()
        .filter(|s| s.name.starts_with("kos-demo-workers-"))
        .map(|s| {
            let retiring = s.tags.iter().any(|t| t == "kos-retire");
            (s.name, s.id, retiring)
        })
        .collect();
    v.sort();
    v
}

/// The Ready workers of the workload cluster.
async fn ready_workers(nodes: &Api<Node>) -> Vec<Node> {
    let list = nodes
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("-workers-"))
        })
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect()
}

/// `Some` once the Cluster is Ready at `generation` or later (a turn of it converged).
async fn ready_since(clusters: &Api<Cluster>, generation: i64) -> Option<()> {
    let s = clusters.get("demo").await.ok()?.status?;
    (s.observed_generation? >= generation
        && s.conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True"))
    .then_some(())
}

/// clusterstate's `FakeNode` of an instance whose creation failed, as the autoscaler hands it to
/// `DeleteNodes`: name and providerID both the instance's id, the `create-error` annotation.
fn fake_node(id: &str) -> ExternalGrpcNode {
    ExternalGrpcNode {
        provider_id: id.to_owned(),
        name: id.to_owned(),
        labels: Default::default(),
        annotations: [(
            "k8s.io/cluster-autoscaler/fake-node-reason".to_owned(),
            "create-error".to_owned(),
        )]
        .into(),
    }
}

/// A group's instances as a loop of the autoscaler reads them (after its `Refresh`); `None` when
/// a call failed.
async fn instances(ca: &mut CloudProviderClient<Channel>, group: &str) -> Option<Vec<Instance>> {
    ca.refresh(RefreshRequest {}).await.ok()?;
    Some(
        ca.node_group_nodes(NodeGroupNodesRequest { id: group.into() })
            .await
            .ok()?
            .into_inner()
            .instances,
    )
}

/// Nova's fault for a server no host can take (nova/conductor/manager.py `NoValidHost`).
const NO_VALID_HOST: &str = "No valid host was found. There are not enough hosts available.";

/// The ids of every server the cloud shows, sorted.
async fn server_ids(session: &kos_cloud::Session) -> Vec<String> {
    let mut v: Vec<String> = session
        .compute()
        .list_servers(&TagQuery::default())
        .await
        .expect("servers")
        .into_iter()
        .map(|s| s.id)
        .collect();
    v.sort();
    v
}

/// The group's target size as a loop of the autoscaler reads it.
async fn target_size(ca: &mut CloudProviderClient<Channel>) -> i32 {
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    ca.node_group_target_size(NodeGroupTargetSizeRequest {
        id: "workers".into(),
    })
    .await
    .expect("target size")
    .into_inner()
    .target_size
}

/// The operator's Cluster controller, as `kos-operator run` runs it.
fn controller(client: &kube::Client, ctx: &Arc<reconcile::Context>) -> JoinHandle<()> {
    tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|_| async {}),
    )
}

/// A fault rule of the simulated cloud: `method` on `path`, answered `status`, each time.
fn rule(method: &str, path: &str, status: u16) -> FaultRule {
    FaultRule {
        id: None,
        method: Some(method.into()),
        path: path.into(),
        body: None,
        status,
        probability: 1.0,
        count: None,
        skip: 0,
        retry_after: None,
        after_side_effect: false,
        build_error: false,
        message: None,
    }
}

/// The paths of the cloud's calls `method` with `operation` that succeeded after call `mark`,
/// each once.
fn calls(sim: &kos_sim::Sim, mark: u64, method: &str, operation: &str) -> Vec<String> {
    let obs = sim.app().observations();
    assert!(
        obs.log.front().is_some_and(|e| e.seq <= mark + 1),
        "the cloud's log was cut"
    );
    obs.log
        .iter()
        .filter(|e| {
            e.seq > mark
                && e.method == method
                && e.operation == operation
                && (200..300).contains(&e.status)
        })
        .map(|e| e.path.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A scale-up of the pool (at 0) whose server Nova accepts (202), then fails to build ("No valid
/// host"), driven as cluster-autoscaler 1.36.1 drives it. kos deletes a server that failed to
/// build at once and boots it again on a later turn; the autoscaler sees one in ERROR when that
/// delete does not go through (Nova refuses it here, a locked server) and no turn runs (the
/// operator stopped). Its clusterstate reads the instance (`NodeGroupNodes`) as being created
/// with an error (`buildInstanceToErrorCodeMappings`); its loop's `deleteCreatedNodesWithErrors`
/// asks for the group's options, then calls `DeleteNodes` with clusterstate's `FakeNode` of it:
/// name and providerID both the instance's id, the `create-error` annotation. The provider
/// deletes exactly that server and lowers the target by one; nothing else is touched, and the
/// operator, back, converges on the lowered count.
async fn a_failed_build_is_given_up_as_the_autoscaler_does(
    sim: &kos_sim::Sim,
    session: &kos_cloud::Session,
    clusters: &Api<Cluster>,
    ca: &CloudProviderClient<Channel>,
    running: &mut JoinHandle<()>,
    restart: impl FnOnce() -> JoinHandle<()>,
) {
    let id = || "workers".to_owned();
    let mut ca = ca.clone();
    let before = server_ids(session).await;
    let objects_before = support::tagged(sim, "demo").await;
    let mark = sim.app().observations().log.back().map_or(0, |e| e.seq);
    let (build, hold) = {
        let mut faults = sim.app().fault_engine();
        let build = faults
            .add(FaultRule {
                body: Some(r#""name": ?"kos-demo-workers-"#.into()),
                count: Some(1),
                build_error: true,
                message: Some(NO_VALID_HOST.into()),
                ..rule("POST", "^/compute/v2.1/servers$", 500)
            })
            .unwrap();
        let hold = faults
            .add(FaultRule {
                message: Some("Instance is locked".into()),
                ..rule("DELETE", "^/compute/v2.1/servers/[^/]+$", 409)
            })
            .unwrap();
        (build, hold)
    };
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest { delta: 1, id: id() })
        .await
        .expect("increase");
    assert_eq!(count(clusters).await, 1);

    // A later loop reads the instance: being created, with its error.
    let failed = until("the failed server reported with its error", || {
        let mut ca = ca.clone();
        async move {
            let instances = instances(&mut ca, &id()).await?;
            instances
                .into_iter()
                .find(|i| i.status.as_ref().is_some_and(|s| s.error_info.is_some()))
        }
    })
    .await;
    let servers = workers(session).await;
    assert_eq!(servers.len(), 1, "one server was made: {servers:?}");
    let (_, server, _) = servers[0].clone();
    assert_eq!(failed.id, format!("openstack:///{server}"));
    let shown = session
        .compute()
        .get_server(&server)
        .await
        .unwrap()
        .expect("the failed server");
    assert_eq!(shown.status, kos_cloud::model::compute::ServerStatus::Error);
    let status = failed.status.clone().unwrap();
    assert_eq!(
        status.instance_state,
        instance_status::InstanceState::InstanceCreating as i32
    );
    let error = status.error_info.unwrap();
    // The autoscaler keeps an error only with a code (externalgrpc's `Nodes`); "No valid host" is
    // a lack of room: its OutOfResourcesErrorClass (1).
    assert!(!error.error_code.is_empty(), "{error:?}");
    assert_eq!(error.instance_error_class, 1, "{error:?}");
    assert!(error.error_message.contains(NO_VALID_HOST), "{error:?}");
    assert_eq!(target_size(&mut ca).await, 1);
    // kos tried to delete it, and Nova refused.
    until("kos's delete of the failed server refused", || async {
        let obs = sim.app().observations();
        obs.log
            .iter()
            .any(|e| {
                e.seq > mark
                    && e.fault_rule == Some(hold)
                    && e.path == format!("/compute/v2.1/servers/{server}")
            })
            .then_some(())
    })
    .await;

    // The operator stops; Nova lets deletes through again, and the fault is gone.
    running.abort();
    assert!(
        (&mut *running).await.unwrap_err().is_cancelled(),
        "the controller stopped"
    );
    {
        let mut faults = sim.app().fault_engine();
        assert!(faults.remove(hold));
        assert!(faults.remove(build));
    }

    // `deleteCreatedNodesWithErrors`: the group's options (`ZeroOrMaxNodeScaling` off: the named
    // nodes as they are), then `DeleteNodes` of the fake node.
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    let options = ca
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: id(),
            defaults: Some(NodeGroupAutoscalingOptions::default()),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group_autoscaling_options
        .unwrap();
    assert!(!options.zero_or_max_node_scaling);
    let fake = fake_node(&failed.id);
    ca.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![fake],
        id: id(),
    })
    .await
    .expect("delete the failed node");
    assert_eq!(count(clusters).await, 0);
    assert_eq!(target_size(&mut ca).await, 0);
    // The next loops read it on its way out, with no error (not named again), then not at all.
    until("the failed server gone", || {
        let mut ca = ca.clone();
        let want = failed.id.clone();
        async move {
            let instances = instances(&mut ca, &id()).await?;
            for i in &instances {
                let s = i.status.clone().unwrap();
                assert_eq!(i.id, want);
                assert_eq!(
                    s.instance_state,
                    instance_status::InstanceState::InstanceDeleting as i32
                );
                assert_eq!(s.error_info, None);
            }
            instances.is_empty().then_some(())
        }
    })
    .await;
    // Nothing else touched: the servers are those before, and the one server made is the one
    // deleted, by the provider (no turn ran).
    assert_eq!(server_ids(session).await, before);
    let made = calls(sim, mark, "POST", "POST /compute/v2.1/servers");
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(
        calls(sim, mark, "DELETE", "DELETE /compute/v2.1/servers/{id}"),
        [format!("/compute/v2.1/servers/{server}")],
        "the one server deleted"
    );

    // The operator back: a turn of the lowered count converges and takes what the failed server
    // left (its port); the cluster has in the cloud what it had.
    let generation = clusters
        .get("demo")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    *running = restart();
    until("a turn of the lowered count converged", || {
        ready_since(clusters, generation)
    })
    .await;
    until("the failed server's objects gone", || async {
        (support::tagged(sim, "demo").await == objects_before).then_some(())
    })
    .await;
    assert_eq!(count(clusters).await, 0);
    assert_eq!(server_ids(session).await, before);
    assert_eq!(made, calls(sim, mark, "POST", "POST /compute/v2.1/servers"));
}

/// A scale-up whose server fails to build while kos is running: kos deletes the server at once
/// (nothing half made is left), so the failure is recorded on the Cluster
/// (`failed.kos.dev/<pool>`) and reported to the autoscaler as the instance being created with
/// its error, under the deleted server's providerID; meanwhile the pool's turns do not boot it
/// again. The autoscaler's `DeleteNodes` of its fake node lowers the count and drops the record;
/// one server was ever made.
async fn a_failed_build_kos_deleted_is_told_to_the_autoscaler(
    sim: &kos_sim::Sim,
    session: &kos_cloud::Session,
    clusters: &Api<Cluster>,
    ca: &CloudProviderClient<Channel>,
) {
    let id = || "workers".to_owned();
    let mut ca = ca.clone();
    let before = server_ids(session).await;
    let mark = sim.app().observations().log.back().map_or(0, |e| e.seq);
    let build = sim
        .app()
        .fault_engine()
        .add(FaultRule {
            body: Some(r#""name": ?"kos-demo-workers-"#.into()),
            count: Some(1),
            build_error: true,
            message: Some(NO_VALID_HOST.into()),
            ..rule("POST", "^/compute/v2.1/servers$", 500)
        })
        .unwrap();
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest { delta: 1, id: id() })
        .await
        .expect("increase");
    // Reported with its error once kos has deleted it.
    let failed = until("the deleted failed server reported with its error", || {
        let mut ca = ca.clone();
        async move {
            let instances = instances(&mut ca, &id()).await?;
            let failed = instances
                .into_iter()
                .find(|i| i.status.as_ref().is_some_and(|s| s.error_info.is_some()))?;
            workers(session).await.is_empty().then_some(failed)
        }
    })
    .await;
    // Fired once (count 1): gone from the rules, or removed now.
    sim.app().fault_engine().remove(build);
    let status = failed.status.clone().unwrap();
    assert_eq!(
        status.instance_state,
        instance_status::InstanceState::InstanceCreating as i32
    );
    let error = status.error_info.unwrap();
    assert_eq!(error.instance_error_class, 1, "{error:?}");
    assert!(error.error_message.contains(NO_VALID_HOST), "{error:?}");
    let server = failed.id.strip_prefix("openstack:///").unwrap().to_owned();
    let recorded = clusters.get("demo").await.unwrap();
    let record = recorded
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .get("failed.kos.dev/workers")
        .cloned()
        .unwrap_or_default();
    assert!(record.contains(&server), "{record}");
    // A turn converges without booting it again: the count of 1 is held by the failure.
    let generation = recorded.metadata.generation.unwrap();
    until("a turn with the failure held converged", || {
        ready_since(clusters, generation)
    })
    .await;
    assert_eq!(workers(session).await, vec![], "not booted again");
    assert_eq!(target_size(&mut ca).await, 1);

    // The autoscaler gives it up: `DeleteNodes` of its fake node.
    let fake = fake_node(&failed.id);
    ca.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![fake],
        id: id(),
    })
    .await
    .expect("delete the failed node");
    assert_eq!(count(clusters).await, 0);
    assert_eq!(target_size(&mut ca).await, 0);
    let annotations = clusters
        .get("demo")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("failed.kos.dev/workers"),
        "{annotations:?}"
    );
    until("the failed instance gone", || {
        let mut ca = ca.clone();
        async move {
            let instances = instances(&mut ca, &id()).await?;
            instances.is_empty().then_some(())
        }
    })
    .await;
    assert_eq!(server_ids(session).await, before);
    let made = calls(sim, mark, "POST", "POST /compute/v2.1/servers");
    assert_eq!(made.len(), 1, "one server was ever made: {made:?}");
}

/// cert-manager renews the endpoint's certificate in its Secret, and kubelet swaps the mounted
/// files: the endpoint serves the new one without a restart (it read its files once before, and
/// served the old certificate until it expired, when every autoscaler's handshake failed).
#[tokio::test]
async fn the_endpoint_serves_a_renewed_certificate_without_a_restart() {
    let client_ca = Ca::new("kos-autoscalers");
    let (old_ca, new_ca) = (Ca::new("serving-2026"), Ca::new("serving-2027"));
    let dir = tempfile::tempdir().unwrap();
    let write = |ca: &Ca| {
        let (cert, key) = ca.sign("kos-operator", &["localhost"], false);
        std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), key).unwrap();
    };
    write(&old_ca);
    std::fs::write(dir.path().join("ca.crt"), &client_ca.pem).unwrap();
    let tls = kos_operator::autoscaler::tls::Tls::load(dir.path(), None)
        .expect("tls")
        .polling_every(Duration::from_millis(100));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // No call reaches the API here: the handshake is what is looked at.
    let nowhere = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let kube = kube::Client::try_from(nowhere).unwrap();
    let serving = tokio::spawn(kos_operator::autoscaler::serve(listener, tls, kube));
    dial(addr, &old_ca, &client_ca, "default/demo")
        .await
        .expect("the first certificate is served");
    assert!(
        dial(addr, &new_ca, &client_ca, "default/demo")
            .await
            .is_err(),
        "a certificate not yet written was served"
    );
    write(&new_ca);
    until("the renewed certificate served", || async {
        dial(addr, &new_ca, &client_ca, "default/demo").await.ok()
    })
    .await;
    assert!(
        dial(addr, &old_ca, &client_ca, "default/demo")
            .await
            .is_err(),
        "the old certificate is still served"
    );
    assert!(!serving.is_finished(), "the endpoint stopped");
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_autoscaler_grows_a_pool_from_zero_and_removes_the_node_it_names() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kos_operator=debug,warn")
        .with_test_writer()
        .try_init();
    let (sim, _fake, client) = support::controller_world().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let identity = support::create_identity(&secrets, &sim).await;
    // The endpoint, as `--autoscaler-bind-address` serves it, from a directory of PEM files: one
    // CA signs its certificate and the autoscalers' (the operator holds its key to sign theirs).
    let client_ca = Ca::new("kos-autoscalers");
    let server_ca = &client_ca;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = server_ca.sign("kos-operator", &["localhost"], false);
    std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), key).unwrap();
    std::fs::write(dir.path().join("ca.crt"), &client_ca.pem).unwrap();
    std::fs::write(dir.path().join("ca.key"), &client_ca.key_pem).unwrap();
    let tls = kos_operator::autoscaler::tls::Tls::load(dir.path(), None).expect("tls");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(kos_operator::autoscaler::serve(
        listener,
        tls,
        client.clone(),
    ));
    let advertised = format!("localhost:{}", addr.port());
    let install = Install::load(&advertised, dir.path()).expect("install");

    let ctx = support::context(
        &client,
        &sim,
        Settings {
            retry: Duration::from_secs(1),
            resync: Duration::from_secs(600),
            autoscaler: Some(Arc::new(install)),
            ..Settings::default()
        },
    );
    let mut running = controller(&client, &ctx);

    let mut spec = example("minimal.yaml")["spec"].clone();
    spec["nodePools"][0]["count"] = json!(0);
    spec["nodePools"][0]["autoscaling"] = json!({"min": 0, "max": 2});
    spec["nodePools"][0]["labels"] = json!({"tier": "batch"});
    spec["nodePools"][0]["taints"] = json!(["dedicated=batch:NoSchedule"]);
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
    until("the Cluster Ready with no worker", || async {
        let c = clusters.get_opt("demo").await.ok()??;
        c.status?
            .conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;

    // Only a certificate of the autoscalers' CA gets through; one names one Cluster.
    let refused = match dial(addr, server_ca, &Ca::new("someone-else"), "default/demo").await {
        Err(_) => true,
        // TLS 1.3: the server refuses the certificate after the client's handshake is done.
        Ok(mut c) => c.refresh(RefreshRequest {}).await.is_err(),
    };
    assert!(refused, "a certificate of another CA was let in");
    let mut other = dial(addr, server_ca, &client_ca, "default/other")
        .await
        .expect("dial");
    let e = other.node_groups(NodeGroupsRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");

    // The operator installed the autoscaler into the cluster, wired to the endpoint: its
    // cloud-config (as cluster-autoscaler reads it) and certificate reach the endpoint.
    let reach = SimReach(sim.app().clone());
    let wl = support::workload(&secrets, &reach).await;
    let installed = until("the autoscaler installed", || {
        let wl = wl.clone();
        async move {
            Api::<Secret>::namespaced(wl, "kube-system")
                .get_opt("cluster-autoscaler-externalgrpc")
                .await
                .ok()?
        }
    })
    .await;
    let file =
        |key: &str| String::from_utf8(installed.data.as_ref().unwrap()[key].0.clone()).unwrap();
    let config: CloudConfig = serde_saphyr::from_str(&file("cloud-config")).expect("cloud-config");
    assert_eq!(config.address, advertised);
    let deployment = Api::<Deployment>::namespaced(wl.clone(), "kube-system")
        .get("cluster-autoscaler")
        .await
        .expect("deployment");
    let pod = deployment.spec.template.spec.unwrap();
    let container = &pod.containers[0];
    let pins = kos_bootstrap::addons::Pins::builtin().unwrap();
    assert_eq!(
        container.image.as_deref(),
        Some(pins.images_for(36).unwrap().cluster_autoscaler.as_str())
    );
    let args = container.args.clone().unwrap();
    assert!(
        args.contains(&"--cloud-provider=externalgrpc".to_owned()),
        "{args:?}"
    );
    let mount = &container.volume_mounts.as_ref().unwrap()[0];
    assert!(args.contains(&format!("--cloud-config={}/cloud-config", mount.mount_path)));
    let volume = &pod.volumes.as_ref().unwrap()[0];
    assert_eq!(volume.name, mount.name);
    assert_eq!(
        volume.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("cluster-autoscaler-externalgrpc")
    );
    // Each file the cloud-config names is a key of the mounted Secret; the autoscaler verifies
    // the endpoint by the address's host, as its client does.
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(file(key_of(
            &config.cacert,
            &mount.mount_path,
        ))))
        .identity(Identity::from_pem(
            file(key_of(&config.cert, &mount.mount_path)),
            file(key_of(&config.key, &mount.mount_path)),
        ))
        .domain_name(config.address.rsplit_once(':').unwrap().0.to_owned());
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("the installed autoscaler's credentials");

    // One loop of the autoscaler, the pool at 0.
    let mut ca = CloudProviderClient::new(channel);
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    let groups = ca
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        (
            groups[0].id.as_str(),
            groups[0].min_size,
            groups[0].max_size
        ),
        ("workers", 0, 2)
    );
    let session = support::session(&sim).await;
    let cp = session
        .compute()
        .list_servers(&TagQuery::default())
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "kos-demo-cp-0")
        .expect("cp-0");
    let cp_group = ca
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(ExternalGrpcNode {
                provider_id: format!("openstack:///{}", cp.id),
                name: cp.name.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group
        .unwrap();
    assert_eq!(cp_group.id, "", "a control plane is no autoscaled group's");
    let target = |r: tonic::Response<NodeGroupTargetSizeResponse>| r.into_inner().target_size;
    let id = || "workers".to_owned();
    assert_eq!(
        target(
            ca.node_group_target_size(NodeGroupTargetSizeRequest { id: id() })
                .await
                .unwrap()
        ),
        0
    );
    let nodes = ca
        .node_group_nodes(NodeGroupNodesRequest { id: id() })
        .await
        .unwrap();
    assert!(nodes.into_inner().instances.is_empty());

    // A pending pod that fits no node: the autoscaler simulates the group's template node.
    let info = ca
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: id() })
        .await
        .expect("template")
        .into_inner();
    let template: k8s_pb::api::core::v1::Node =
        prost::Message::decode(info.node_bytes.as_slice()).expect("a v1.Node");
    let labels = template.metadata.clone().unwrap().labels;
    assert_eq!(labels["tier"], "batch");
    assert_eq!(labels["kos/pool"], "workers");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m1.medium");
    let taints = template.spec.clone().unwrap().taints;
    assert_eq!(taints.len(), 1);
    assert_eq!(
        (
            taints[0].key.as_deref(),
            taints[0].value.as_deref(),
            taints[0].effect.as_deref()
        ),
        (Some("dedicated"), Some("batch"), Some("NoSchedule"))
    );
    let flavor = session.compute().find_flavor("m1.medium").await.unwrap();
    let capacity = template.status.clone().unwrap().capacity;
    assert_eq!(
        capacity["cpu"].string.as_deref(),
        Some(flavor.vcpus.to_string().as_str())
    );
    assert_eq!(
        capacity["memory"].string.clone().unwrap(),
        format!("{}Mi", flavor.ram)
    );
    let defaults = NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.5,
        ..Default::default()
    };
    let options = ca
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: id(),
            defaults: Some(defaults),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(options.node_group_autoscaling_options, Some(defaults));
    // Beyond max is refused and changes nothing; one more is taken.
    let e = ca
        .node_group_increase_size(NodeGroupIncreaseSizeRequest { delta: 3, id: id() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(count(&clusters).await, 0);

    // A scale-up whose server Nova accepts (202), then fails to build ("No valid host").
    a_failed_build_is_given_up_as_the_autoscaler_does(
        &sim,
        &session,
        &clusters,
        &ca,
        &mut running,
        || controller(&client, &ctx),
    )
    .await;

    // The same while kos runs: it deletes the failed server, and the autoscaler is told.
    a_failed_build_kos_deleted_is_told_to_the_autoscaler(&sim, &session, &clusters, &ca).await;

    // The fault gone, one more is taken.
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest { delta: 1, id: id() })
        .await
        .expect("increase");
    assert_eq!(count(&clusters).await, 1);

    // The Cluster's next turn makes the node; it joins Ready with the template's labels and taints.
    let nodes: Api<Node> = Api::all(wl.clone());
    let joined = until("a Ready worker", || async {
        let ready = ready_workers(&nodes).await;
        (ready.len() == 1).then(|| ready[0].clone())
    })
    .await;
    let node_labels = joined.metadata.labels.clone().unwrap_or_default();
    for key in ["tier", "kos/pool"] {
        assert_eq!(node_labels.get(key), labels.get(key), "{key}");
    }
    let node_taints = joined.spec.clone().unwrap().taints.unwrap_or_default();
    assert!(
        node_taints.iter().any(|t| t.key == "dedicated"
            && t.value.as_deref() == Some("batch")
            && t.effect == "NoSchedule"),
        "{node_taints:?}"
    );

    // The next loop sees it running, in its group.
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    let first = workers(&session).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let instances = ca
        .node_group_nodes(NodeGroupNodesRequest { id: id() })
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].id, format!("openstack:///{}", first[0].1));
    assert_eq!(
        instances[0].status.clone().unwrap().instance_state,
        instance_status::InstanceState::InstanceRunning as i32
    );
    let group = ca
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(ExternalGrpcNode {
                provider_id: instances[0].id.clone(),
                name: first[0].0.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group
        .unwrap();
    assert_eq!(group.id, "workers");
    // Only what is not made yet may be taken back without naming a node.
    let e = ca
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -1,
            id: id(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // A second node, then the autoscaler removes the first (kos alone would remove the newest).
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest { delta: 1, id: id() })
        .await
        .expect("increase");
    until("two Ready workers", || async {
        (ready_workers(&nodes).await.len() == 2).then_some(())
    })
    .await;
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    let (name, server, _) = first[0].clone();
    let delete = NodeGroupDeleteNodesRequest {
        nodes: vec![ExternalGrpcNode {
            provider_id: format!("openstack:///{server}"),
            name: name.clone(),
            ..Default::default()
        }],
        id: id(),
    };
    // Calls that failed before the count was lowered (a conflict, a lost answer, a killed
    // leader) left this server tagged, and the other one: the count is lowered once, for the named
    // server, and the other's tag comes off (it would leave in the named one's place).
    let other = workers(&session)
        .await
        .into_iter()
        .find(|w| w.0 != name)
        .expect("the other worker");
    for id in [&server, &other.1] {
        session
            .compute()
            .add_server_tag(id, "kos-retire")
            .await
            .expect("a failed call's tag");
    }
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    ca.node_group_delete_nodes(delete.clone())
        .await
        .expect("delete");
    assert_eq!(count(&clusters).await, 1);
    let now = workers(&session).await;
    assert!(
        now.iter().any(|w| w.1 == other.1 && !w.2),
        "the other's tag stays: {now:?}"
    );
    // Asked again (the autoscaler retrying), nothing more goes.
    ca.node_group_delete_nodes(delete)
        .await
        .expect("delete again");
    assert_eq!(count(&clusters).await, 1);
    let left = until("the named worker gone", || async {
        let w = workers(&session).await;
        (w.len() == 1).then_some(w)
    })
    .await;
    assert_ne!(left[0].0, name, "the named node stayed and another went");
    until("one Ready worker, not the named one", || async {
        let ready = ready_workers(&nodes).await;
        (ready.len() == 1 && ready[0].metadata.name.as_deref() != Some(name.as_str())).then_some(())
    })
    .await;

    // Turns went by: the autoscaler's certificate was kept (a new one would restart it).
    let secret = Api::<Secret>::namespaced(wl.clone(), "kube-system")
        .get("cluster-autoscaler-externalgrpc")
        .await
        .unwrap();
    assert_eq!(
        secret.data.as_ref().unwrap()["tls.crt"].0,
        installed.data.as_ref().unwrap()["tls.crt"].0
    );
    // No pool autoscaled any more: the autoscaler goes.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "remove", "path": "/spec/nodePools/0/autoscaling"}
    ]))
    .unwrap();
    clusters
        .patch("demo", &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .expect("autoscaling off");
    until("the autoscaler taken out", || {
        let wl = wl.clone();
        async move {
            let d = Api::<Deployment>::namespaced(wl, "kube-system")
                .get_opt("cluster-autoscaler")
                .await
                .ok()?;
            d.is_none().then_some(())
        }
    })
    .await;
}

/// What the operator installs is valid for each supported minor, and its RBAC is the table's:
/// no Secrets, no writes to workloads, no wildcard.
#[test]
fn the_autoscalers_objects_are_valid_for_each_minor() {
    let objects = install::objects(
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1",
        "00",
    );
    support::validate_for_each_minor(&objects);
    let role = |kind: &str| {
        objects.iter().find(|o| o["kind"] == kind).unwrap()["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let verbs = |rules: &[serde_json::Value]| -> usize {
        rules
            .iter()
            .map(|r| r["verbs"].as_array().unwrap().len())
            .sum()
    };
    let table = |t: &[install::Rule]| -> usize { t.iter().map(|r| r.2.len()).sum() };
    assert_eq!(verbs(&role("ClusterRole")), table(install::CLUSTER_RULES));
    assert_eq!(verbs(&role("Role")), table(install::NAMESPACE_RULES));
    for r in role("ClusterRole").iter().chain(role("Role").iter()) {
        let text = r.to_string();
        assert!(!text.contains("secrets") && !text.contains('*'), "{text}");
        if r["apiGroups"][0] == "apps" || r["apiGroups"][0] == "batch" {
            assert!(
                !["update", "patch", "create", "delete"]
                    .iter()
                    .any(|v| text.contains(v)),
                "{text}"
            );
        }
    }
}
