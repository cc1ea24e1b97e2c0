//! The node controller end to end: kos-sim as OpenStack, kos-kube-fake as Kubernetes, the real
//! controller (`kos_ccm::node::run`) in a task, and the cloud.conf → Session path the binary takes.
//! Every check polls for the expected state with a generous deadline; none times anything.

mod support;
use support::{DEADLINE, R, wait_for, wait_for_async};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use kos_ccm::CloudConfig;
use kos_ccm::context::Context;
use kos_ccm::node::{self, Settings, labels, reason};
use kos_cloud::model::compute::{Boot, Nic, Server, ServerCreate, ServerStatus};
use kos_cloud::model::image::ImageFilter;
use kos_cloud::model::network::{
    FloatingIpCreate, NetworkCreate, NetworkFilter, PortFilter, RouterCreate, Subnet, SubnetCreate,
};
use kos_cloud::{CloudProfile, Env, RetryPolicy, Session};
use kos_kube_fake::{FakeKube, Fault, RecordedEvent, Verb};
use kos_sim::{Sim, SimConfig};
use kube::runtime::events::Reporter;
use tokio::time::Instant;

struct Harness {
    sim: Sim,
    fake: FakeKube,
    session: Session,
    _controller: support::Running,
    _dir: tempfile::TempDir,
}

/// Quick periods so refresh and lifecycle run many times within a test.
fn fast_settings() -> Settings {
    Settings {
        status_update_frequency: Duration::from_millis(400),
        monitor_period: Duration::from_millis(200),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        ..Settings::default()
    }
}

/// A sim, a fake API server and the controller, configured by a cloud.conf whose `[Global]` points
/// at the sim and whose other sections are `extra`.
async fn start(extra: &str, settings: Settings) -> R<Harness> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let c = sim.config();
    let conf = format!(
        "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\nregion = {}\n\n{extra}",
        sim.auth_url(),
        c.username,
        c.password,
        c.project,
        c.region
    );
    let loaded = CloudConfig::parse("cloud.conf", &conf)?;
    let dir = tempfile::tempdir()?;
    // Nothing of the machine running the tests: no HOME, no /etc/openstack.
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile: CloudProfile = loaded.config.profile(&env)?;
    let session = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    let fake = FakeKube::start().await?;
    let ctx = Arc::new(Context::new(
        session.clone(),
        loaded.config,
        "kubernetes",
        fake.client()?,
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some("test".into()),
        },
    ));
    let controller = support::Running::spawn(|shutdown| node::run(ctx, settings, shutdown));
    Ok(Harness {
        sim,
        fake,
        session,
        _controller: controller,
        _dir: dir,
    })
}

impl Harness {
    async fn network(&self, name: &str, cidr: &str) -> R<Subnet> {
        let net = self
            .session
            .network()
            .create_network(&NetworkCreate {
                name: name.into(),
                ..Default::default()
            })
            .await?;
        Ok(self
            .session
            .network()
            .create_subnet(&SubnetCreate::new(&net.id, format!("{name}-subnet"), cidr))
            .await?)
    }

    /// An ACTIVE server named `name` with one NIC per network (in this order).
    async fn server(&self, name: &str, subnets: &[&Subnet]) -> R<Server> {
        let nova = self.session.compute();
        let mut flavors = nova.list_flavors().await?;
        flavors.sort_by_key(|f| (f.ram, f.vcpus));
        let flavor = flavors.into_iter().next().ok_or("no flavor")?;
        let image = self
            .session
            .image()
            .list_images(&ImageFilter::default())
            .await?
            .into_iter()
            .next()
            .ok_or("no image")?;
        let mut req = ServerCreate::new(name, &flavor.id, Boot::Image(image.id));
        req.nics = subnets
            .iter()
            .map(|s| Nic::Network {
                id: s.network_id.clone(),
                fixed_ip: None,
            })
            .collect();
        let created = nova.create_server(&req).await?;
        Ok(nova
            .wait_for_server_active(&created.id, Instant::now() + DEADLINE)
            .await?)
    }

    /// The server's fixed IP on `subnet`.
    async fn ip_on(&self, server: &Server, subnet: &Subnet) -> R<String> {
        let ports = self
            .session
            .network()
            .list_ports(&PortFilter {
                device_id: Some(server.id.clone()),
                ..Default::default()
            })
            .await?;
        ports
            .iter()
            .flat_map(|p| &p.fixed_ips)
            .find(|ip| ip.subnet_id == subnet.id)
            .map(|ip| ip.ip_address.clone())
            .ok_or_else(|| format!("no address on {}", subnet.name).into())
    }

    fn node(&self, name: &str) -> R<Option<Node>> {
        Ok(self.fake.get::<Node>(None, name)?)
    }

    fn events_for(&self, node: &str, reason: &str) -> Vec<RecordedEvent> {
        self.fake
            .events()
            .into_iter()
            .filter(|e| e.regarding_name.as_deref() == Some(node) && e.reason == reason)
            .collect()
    }

    /// The node without the uninitialized taint, once its `Synced` Event (recorded after the
    /// taint's removal) is there too: nothing of the initialisation is still in flight.
    async fn initialized(&self, name: &str) -> R<Node> {
        wait_for(&format!("node {name} initialised"), || {
            let synced = !self.events_for(name, reason::SYNCED).is_empty();
            Ok(self
                .node(name)?
                .filter(|n| synced && !has_taint(n, labels::TAINT_UNINITIALIZED)))
        })
        .await
    }

    fn set_ready(&self, name: &str, ready: bool) -> R {
        self.fake.modify::<Node>(None, name, |n| {
            n.status.get_or_insert_default().conditions = Some(vec![condition(ready)]);
        })?;
        Ok(())
    }
}

fn condition(ready: bool) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: Some(
            if ready {
                "KubeletReady"
            } else {
                "KubeletNotReady"
            }
            .into(),
        ),
        ..Default::default()
    }
}

fn taint(key: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }
}

/// A Node as kubelet `--cloud-provider=external` registers it: tainted, NotReady, its hostname as
/// only address.
fn kubelet_node(name: &str, provider_id: Option<&str>) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/hostname".to_owned(),
        name.to_owned(),
    )]));
    n.spec = Some(NodeSpec {
        provider_id: provider_id.map(str::to_owned),
        taints: Some(vec![
            taint(labels::TAINT_UNINITIALIZED),
            taint("node.kubernetes.io/not-ready"),
        ]),
        ..Default::default()
    });
    n.status = Some(NodeStatus {
        addresses: Some(vec![k8s_openapi::api::core::v1::NodeAddress {
            type_: "Hostname".into(),
            address: name.into(),
        }]),
        conditions: Some(vec![condition(false)]),
        ..Default::default()
    });
    n
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

fn addresses(n: &Node) -> Vec<String> {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| format!("{} {}", a.type_, a.address))
                .collect()
        })
        .unwrap_or_default()
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn node_is_initialised_addresses_first_then_labels_and_the_taint() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    let server = h.server("kos-a-w-0", &[&subnet]).await?;
    let ip = h.ip_on(&server, &subnet).await?;
    let pid = format!("openstack:///{}", server.id);
    h.fake.insert(&kubelet_node("kos-a-w-0", Some(&pid)))?;

    let n = h.initialized("kos-a-w-0").await?;
    assert_eq!(
        addresses(&n),
        [format!("InternalIP {ip}"), "Hostname kos-a-w-0".into()]
    );
    let region = h.sim.config().region.clone();
    let flavor = server
        .flavor
        .original_name
        .clone()
        .ok_or("no flavor name")?;
    for (k, v) in [
        (labels::INSTANCE_TYPE, flavor.as_str()),
        (labels::INSTANCE_TYPE_BETA, flavor.as_str()),
        (labels::ZONE, "nova"),
        (labels::ZONE_BETA, "nova"),
        (labels::REGION, region.as_str()),
        (labels::REGION_BETA, region.as_str()),
    ] {
        assert_eq!(label(&n, k), Some(v), "{k}");
    }
    let host_id = server
        .host_id
        .clone()
        .filter(|h| !h.is_empty())
        .ok_or("no hostId")?;
    assert_eq!(label(&n, labels::HOST_ID), Some(host_id.as_str()));
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some(pid.as_str())
    );
    // Only the CCM's own taint goes.
    assert!(has_taint(&n, "node.kubernetes.io/not-ready"));
    assert_eq!(h.events_for("kos-a-w-0", reason::SYNCED).len(), 1);

    // The addresses were written before the taint was removed.
    let writes = h.fake.writes();
    let status = writes
        .iter()
        .position(|r| r.subresource.as_deref() == Some("status"))
        .ok_or("no status write")?;
    let untaint = writes
        .iter()
        .position(|r| {
            r.verb == Verb::Patch
                && r.subresource.is_none()
                && r.resource.as_deref() == Some("nodes")
        })
        .ok_or("no node patch")?;
    assert!(status < untaint, "{writes:#?}");
    Ok(())
}

#[tokio::test]
async fn node_without_provider_id_is_found_by_name_and_gets_a_regional_one() -> R {
    let h = start(
        "",
        Settings {
            regional_provider_id: true,
            ..fast_settings()
        },
    )
    .await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    let server = h.server("kos-a.cp-0", &[&subnet]).await?;
    // A server whose name the node's is a regex prefix of must not match.
    h.server("kos-aXcp-0-extra", &[&subnet]).await?;
    h.fake.insert(&kubelet_node("kos-a.cp-0", None))?;
    let n = h.initialized("kos-a.cp-0").await?;
    let region = h.sim.config().region.clone();
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some(format!("openstack://{region}/{}", server.id).as_str())
    );
    Ok(())
}

#[tokio::test]
async fn provided_node_ip_is_preferred_and_the_only_internal_ip() -> R {
    let h = start("", fast_settings()).await?;
    let a = h.network("kos-a", "10.0.0.0/24").await?;
    let b = h.network("kos-b", "10.1.0.0/24").await?;
    let server = h.server("kos-w-1", &[&a, &b]).await?;
    let ip_b = h.ip_on(&server, &b).await?;
    let mut n = kubelet_node("kos-w-1", None);
    n.metadata.annotations = Some(BTreeMap::from([(
        labels::PROVIDED_NODE_IP.to_owned(),
        ip_b.clone(),
    )]));
    h.fake.insert(&n)?;
    let n = h.initialized("kos-w-1").await?;
    assert_eq!(
        addresses(&n),
        [format!("InternalIP {ip_b}"), "Hostname kos-w-1".into()]
    );

    // An IP the server does not have keeps the node tainted, with a Warning.
    let mut bad = kubelet_node("kos-w-2", None);
    bad.metadata.annotations = Some(BTreeMap::from([(
        labels::PROVIDED_NODE_IP.to_owned(),
        "192.0.2.99".to_owned(),
    )]));
    h.server("kos-w-2", &[&a]).await?;
    h.fake.insert(&bad)?;
    wait_for("ProvidedNodeIPInvalid event", || {
        Ok((!h
            .events_for("kos-w-2", reason::PROVIDED_NODE_IP_INVALID)
            .is_empty())
        .then_some(()))
    })
    .await?;
    let still = h.node("kos-w-2")?.ok_or("node gone")?;
    assert!(has_taint(&still, labels::TAINT_UNINITIALIZED));
    Ok(())
}

#[tokio::test]
async fn internal_and_public_network_names_choose_the_address_types() -> R {
    let h = start(
        "[Networking]\ninternal-network-name = kos-int\npublic-network-name = kos-pub\n",
        fast_settings(),
    )
    .await?;
    let int = h.network("kos-int", "10.0.0.0/24").await?;
    let public = h.network("kos-pub", "172.30.0.0/24").await?;
    let storage = h.network("kos-storage", "10.2.0.0/24").await?;
    let server = h.server("kos-w-0", &[&int, &public, &storage]).await?;
    let (ip_int, ip_pub) = (
        h.ip_on(&server, &int).await?,
        h.ip_on(&server, &public).await?,
    );
    h.fake.insert(&kubelet_node("kos-w-0", None))?;
    let n = h.initialized("kos-w-0").await?;
    assert_eq!(
        addresses(&n),
        [
            format!("InternalIP {ip_int}"),
            format!("ExternalIP {ip_pub}"),
            "Hostname kos-w-0".into()
        ]
    );
    Ok(())
}

#[tokio::test]
async fn addresses_are_refreshed_after_a_floating_ip_is_attached() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    let server = h.server("kos-w-0", &[&subnet]).await?;
    h.fake.insert(&kubelet_node("kos-w-0", None))?;
    h.initialized("kos-w-0").await?;

    let neutron = h.session.network();
    let public = neutron
        .list_networks(&NetworkFilter {
            external: Some(true),
            ..Default::default()
        })
        .await?
        .into_iter()
        .next()
        .ok_or("no external network")?;
    let router = neutron
        .create_router(&RouterCreate::with_gateway("kos-router", &public.id))
        .await?;
    neutron.add_router_interface(&router.id, &subnet.id).await?;
    let port = neutron
        .list_ports(&PortFilter {
            device_id: Some(server.id.clone()),
            ..Default::default()
        })
        .await?
        .into_iter()
        .next()
        .ok_or("no port")?;
    let fip = neutron
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: public.id.clone(),
            port_id: Some(port.id.clone()),
            ..Default::default()
        })
        .await?;
    let want = format!("ExternalIP {}", fip.floating_ip_address);
    wait_for("the floating IP as ExternalIP", || {
        Ok(h.node("kos-w-0")?.filter(|n| addresses(n).contains(&want)))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_not_ready_node_whose_server_is_gone_is_deleted_but_a_ready_one_is_kept() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    let keep = h.server("kos-ready", &[&subnet]).await?;
    let lose = h.server("kos-notready", &[&subnet]).await?;
    for name in ["kos-ready", "kos-notready"] {
        h.fake.insert(&kubelet_node(name, None))?;
        h.initialized(name).await?;
    }
    h.set_ready("kos-ready", true)?;
    let nova = h.session.compute();
    nova.delete_server(&keep.id).await?;
    nova.delete_server(&lose.id).await?;
    wait_for_async("both servers gone", || async {
        Ok((nova.get_server(&keep.id).await?.is_none()
            && nova.get_server(&lose.id).await?.is_none())
        .then_some(()))
    })
    .await?;

    wait_for("the NotReady node deleted", || {
        Ok(h.node("kos-notready")?.is_none().then_some(()))
    })
    .await?;
    assert_eq!(h.events_for("kos-notready", reason::DELETING_NODE).len(), 1);
    // The Ready node was looked at after its server went (the refresh reports it) and is kept.
    wait_for("the Ready node's server reported missing", || {
        Ok((!h
            .events_for("kos-ready", reason::INSTANCE_NOT_FOUND)
            .is_empty())
        .then_some(()))
    })
    .await?;
    assert!(h.node("kos-ready")?.is_some());
    Ok(())
}

#[tokio::test]
async fn a_shut_off_server_taints_its_node_until_it_runs_again_or_the_node_is_ready() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    let server = h.server("kos-w-0", &[&subnet]).await?;
    h.fake.insert(&kubelet_node("kos-w-0", None))?;
    h.initialized("kos-w-0").await?;
    let nova = h.session.compute();
    let status = |want: ServerStatus| {
        let nova = &nova;
        let id = server.id.clone();
        move || {
            let want = want.clone();
            let id = id.clone();
            async move {
                Ok(nova
                    .get_server(&id)
                    .await?
                    .filter(|s| s.status == want)
                    .map(|_| ()))
            }
        }
    };
    let h = &h;
    let shutdown = |on: bool| {
        move || -> R<Option<()>> {
            Ok(h.node("kos-w-0")?
                .filter(|n| has_taint(n, labels::TAINT_SHUTDOWN) == on)
                .map(|_| ()))
        }
    };

    nova.stop_server(&server.id).await?;
    wait_for_async("SHUTOFF", status(ServerStatus::Shutoff)).await?;
    wait_for("the shutdown taint", shutdown(true)).await?;
    wait_for("the InstanceShutdown event", || {
        Ok((!h
            .events_for("kos-w-0", reason::INSTANCE_SHUTDOWN)
            .is_empty())
        .then_some(()))
    })
    .await?;
    nova.start_server(&server.id).await?;
    wait_for_async("ACTIVE", status(ServerStatus::Active)).await?;
    wait_for(
        "the shutdown taint removed (server ACTIVE)",
        shutdown(false),
    )
    .await?;

    nova.stop_server(&server.id).await?;
    wait_for_async("SHUTOFF again", status(ServerStatus::Shutoff)).await?;
    wait_for("the shutdown taint again", shutdown(true)).await?;
    h.set_ready("kos-w-0", true)?;
    wait_for("the shutdown taint removed (node Ready)", shutdown(false)).await?;
    // A shut-off server's node is never deleted.
    assert!(h.node("kos-w-0")?.is_some());
    Ok(())
}

#[tokio::test]
async fn an_unknown_node_is_reported_kept_and_initialised_once_its_server_appears() -> R {
    let h = start("", fast_settings()).await?;
    h.fake.insert(&kubelet_node("kos-ghost", None))?;
    wait_for("InstanceNotFound event", || {
        Ok(h.events_for("kos-ghost", reason::INSTANCE_NOT_FOUND)
            .into_iter()
            .next())
    })
    .await
    .and_then(|e| {
        if e.type_ == "Warning" && e.message.contains("kos-ghost") {
            Ok(())
        } else {
            Err(format!("unexpected event {e:?}").into())
        }
    })?;
    // NotReady and without providerID: reported, never deleted.
    let n = h.node("kos-ghost")?.ok_or("the unknown node was deleted")?;
    assert!(has_taint(&n, labels::TAINT_UNINITIALIZED));

    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    h.server("kos-ghost", &[&subnet]).await?;
    h.initialized("kos-ghost").await?;

    // Two servers with one node's name: reported, not guessed.
    h.server("kos-twin", &[&subnet]).await?;
    h.server("kos-twin", &[&subnet]).await?;
    h.fake.insert(&kubelet_node("kos-twin", None))?;
    wait_for("InstanceLookupFailed event", || {
        Ok((!h
            .events_for("kos-twin", reason::INSTANCE_LOOKUP_FAILED)
            .is_empty())
        .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn steady_state_reads_the_cloud_but_writes_nothing() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    h.server("kos-w-0", &[&subnet]).await?;
    h.fake.insert(&kubelet_node("kos-w-0", None))?;
    h.initialized("kos-w-0").await?;
    h.set_ready("kos-w-0", true)?;
    // Whatever the Ready change triggers writes nothing either: from here on, nothing may write.
    h.fake.clear_requests();
    let before = h.session.counters();
    wait_for("three address refreshes", || {
        let n = h
            .session
            .counters()
            .since(&before)
            .operation(kos_cloud::ServiceKind::Network, "port.list");
        Ok((n >= 3).then_some(()))
    })
    .await?;
    assert_eq!(h.fake.writes(), [], "a no-op resync wrote");
    Ok(())
}

#[tokio::test]
async fn a_write_that_loses_a_race_is_retried() -> R {
    let h = start("", fast_settings()).await?;
    let subnet = h.network("kos-net", "10.0.0.0/24").await?;
    h.server("kos-w-0", &[&subnet]).await?;
    // The first two node patches (the addresses, then the labels and taint) fail as if another
    // writer had been quicker.
    h.fake
        .inject(Fault::new(409).verb(Verb::Patch).resource("nodes").times(2));
    h.fake.insert(&kubelet_node("kos-w-0", None))?;
    h.initialized("kos-w-0").await?;
    let failed = h
        .fake
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Patch && r.status == 409)
        .count();
    assert_eq!(failed, 2);
    assert_eq!(h.events_for("kos-w-0", reason::SYNCED).len(), 1);
    Ok(())
}
