//! Issue 23's autoscaling: kos-operator's externalgrpc CloudProvider, over mutual TLS, driven as
//! cluster-autoscaler 1.36 drives it (its externalgrpc provider: `Refresh` at each loop, then
//! `NodeGroups`, `NodeGroupForNode` per node, `NodeGroupTargetSize` and `NodeGroupNodes` per group;
//! for a scale-up, `NodeGroupTemplateNodeInfo` of a group with no node and `NodeGroupIncreaseSize`;
//! for a scale-down, `NodeGroupDeleteNodes` of the drained node). A pool at 0 grows to a Ready node
//! with the template's labels and taints, and a scale-down removes exactly the named node: the
//! older of two, where kos alone would take the newest.

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
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::Controller;
use serde_json::json;
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
    let tls = kos_operator::autoscaler::tls::server_config(dir.path()).expect("tls");
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
    let _controller = tokio::spawn(
        Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|_| async {}),
    );

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
