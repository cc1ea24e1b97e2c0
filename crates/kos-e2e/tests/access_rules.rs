//! kos's access rules (`addons.credentialAccessRules`, `kos_cluster::access_rules::CALLS`) are
//! enough for kos-ccm and kos-csi, and what they allow is what they use: on kos-sim, whose services
//! check a credential's rules as keystonemiddleware does (a 401 for a request no rule allows),
//! kos-ccm's load-balancer reconcile makes a Service's load balancer and deletes it, and kos-csi's
//! controller makes a volume, attaches it to a server, detaches and deletes it, on a session of an
//! application credential carrying exactly kos's rules. The same with one rule left out fails
//! with the 401.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus, Service};
use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::CloudConfig;
use kos_ccm::lb::{LbSettings, LoadBalancers};
use kos_cloud::model::compute::{Boot, Nic, ServerCreate};
use kos_cloud::model::identity::AccessRule;
use kos_cloud::model::image::ImageFilter;
use kos_cloud::model::network::{NetworkCreate, PortCreate, RouterCreate, SubnetCreate};
use kos_cloud::{
    AppCredentialRef, CloudError, CloudProfile, Env, ProfileAuth, RetryPolicy, Session,
};
use kos_cluster::access_rules::{CALLS, Call, rules_for};
use kos_csi::config::DriverConfig;
use kos_csi::controller::Controller;
use kos_csi::{CsiError, GIB, csi};
use kos_sim::{Sim, SimConfig};
use tokio::time::Instant;

type R<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Cloud {
    sim: Sim,
    admin: Session,
    profile: CloudProfile,
    subnet: String,
    public: String,
    nodes: Vec<Node>,
    server: String,
    _dir: tempfile::TempDir,
}

async fn cloud() -> R<Cloud> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let dir = tempfile::tempdir()?;
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    let admin = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    let net = admin.network();
    let public = net.external_network(None).await?.id;
    let n = net
        .create_network(&NetworkCreate {
            name: "nodes".into(),
            ..Default::default()
        })
        .await?;
    let s = net
        .create_subnet(&SubnetCreate::new(&n.id, "nodes", "10.10.0.0/24"))
        .await?;
    let router = net
        .create_router(&RouterCreate::with_gateway("router", &public))
        .await?;
    net.add_router_interface(&router.id, &s.id).await?;
    let mut nodes = Vec::new();
    for i in 1..=2 {
        let port = net
            .create_port(&PortCreate::new(&n.id, format!("node-{i}")))
            .await?;
        let ip = port
            .fixed_ips
            .first()
            .ok_or("no fixed IP")?
            .ip_address
            .clone();
        nodes.push(node(&format!("node-{i}"), &ip));
    }
    // The server a volume is attached to (made by the user, as kos makes nodes).
    let mut flavors = admin.compute().list_flavors().await?;
    flavors.sort_by_key(|f| (f.ram, f.vcpus));
    let flavor = flavors.first().ok_or("no flavor")?.id.clone();
    let image = admin
        .image()
        .list_images(&ImageFilter::default())
        .await?
        .first()
        .ok_or("no image")?
        .id
        .clone();
    let mut req = ServerCreate::new("node-1", &flavor, Boot::Image(image));
    req.nics = vec![Nic::Network {
        id: n.id.clone(),
        fixed_ip: None,
    }];
    let server = admin.compute().create_server(&req).await?.id;
    admin
        .compute()
        .wait_for_server_active(&server, deadline())
        .await?;
    Ok(Cloud {
        sim,
        admin,
        profile,
        subnet: s.id,
        public,
        nodes,
        server,
        _dir: dir,
    })
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn node(name: &str, ip: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }]),
            ..Default::default()
        }),
    }
}

impl Cloud {
    /// A session of a new application credential of the user carrying `rules`, as kos-ccm and
    /// kos-csi run (kos's roles, restricted).
    async fn session_with(&self, name: &str, rules: Vec<AccessRule>) -> R<Session> {
        let roles = kos_cluster::credential::ccm_roles(&self.admin.token_roles())?;
        let mut req = kos_cluster::credential::request(name, "ar", &roles, 1, chrono::Utc::now());
        req.access_rules = rules.clone();
        let cred = self
            .admin
            .identity()
            .create_application_credential(&req)
            .await?;
        assert_eq!(
            cred.credential.access_rules.len(),
            rules.len(),
            "Keystone keeps every rule"
        );
        let profile = CloudProfile {
            name: format!("sim-{name}"),
            auth: ProfileAuth::ApplicationCredential {
                credential: AppCredentialRef::Id(cred.credential.id.clone()),
                secret: cred.secret.clone(),
            },
            ..self.profile.clone()
        };
        Ok(Session::connect(&profile)
            .await?
            .with_retry_policy(RetryPolicy::fast()))
    }

    fn ccm(&self, session: &Session, cluster: &str) -> R<LoadBalancers> {
        let text = format!(
            "[Global]\nuse-clouds = true\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {}\n",
            self.subnet, self.public
        );
        let config = Arc::new(CloudConfig::parse("cloud.conf", &text)?.config);
        Ok(LoadBalancers::new(
            session.clone(),
            config,
            LbSettings {
                pending_requeue: Duration::from_millis(10),
                retry_requeue: Duration::from_millis(50),
                snapshot_max_age: Duration::from_secs(2),
                ..LbSettings::new(cluster)
            },
        ))
    }

    /// The load balancers of the project, as the user sees them.
    async fn lb_count(&self) -> R<usize> {
        Ok(self
            .admin
            .load_balancer()
            .list_load_balancers(&Default::default())
            .await?
            .len())
    }
}

fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("00000000-0000-4000-8000-{:0>12}", name.len())),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                node_port: Some(30080),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: Some(ServiceStatus::default()),
    }
}

/// kos-ccm's reconcile of one Service until it converges, then of its deletion until that does:
/// the first error, if any.
async fn lb_flow(lbs: &LoadBalancers, nodes: &[Node]) -> Result<(), CloudErrorText> {
    let mut svc = service("web");
    let end = deadline();
    loop {
        let o = lbs.ensure_service(&svc, nodes).await.map_err(text)?;
        let ann = svc.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in &o.annotations {
            ann.insert(k.clone(), v.clone());
        }
        if let Some(s) = &o.status {
            svc.status
                .get_or_insert_with(ServiceStatus::default)
                .load_balancer = Some(s.clone());
        }
        if o.converged {
            break;
        }
        if let Some(e) = o.events.iter().find(|e| e.reason.contains("Fail")) {
            return Err(CloudErrorText(format!("{}: {}", e.reason, e.note)));
        }
        assert!(Instant::now() < end, "not converged: {o:?}");
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(50))).await;
    }
    loop {
        let o = lbs.ensure_service_deleted(&svc).await.map_err(text)?;
        if o.converged {
            return Ok(());
        }
        if let Some(e) = o.events.iter().find(|e| e.reason.contains("Fail")) {
            return Err(CloudErrorText(format!("{}: {}", e.reason, e.note)));
        }
        assert!(Instant::now() < end, "not deleted: {o:?}");
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(50))).await;
    }
}

/// An error as text (kos-ccm's and kos-csi's error types differ; the test reads the status).
#[derive(Debug)]
struct CloudErrorText(String);

/// The error and its sources: kos-ccm's names the step, its source the cloud's answer.
fn text(e: impl std::error::Error) -> CloudErrorText {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(x) = source {
        s.push_str(": ");
        s.push_str(&x.to_string());
        source = x.source();
    }
    CloudErrorText(s)
}

fn create_req(name: &str) -> csi::CreateVolumeRequest {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: GIB,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: "ext4".into(),
                ..Default::default()
            })),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        ..Default::default()
    }
}

/// kos-csi's controller: a volume made, published to `server`, unpublished, deleted.
async fn csi_flow(ctl: &Controller, server: &str) -> Result<(), CloudErrorText> {
    let v = ctl
        .create_volume(create_req("pvc-1"))
        .await
        .map_err(text)?
        .volume
        .ok_or_else(|| CloudErrorText("no volume".into()))?;
    let cap = {
        use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
        csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }
    };
    ctl.controller_publish_volume(csi::ControllerPublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: server.to_owned(),
        volume_capability: Some(cap),
        ..Default::default()
    })
    .await
    .map_err(text)?;
    ctl.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: server.to_owned(),
        ..Default::default()
    })
    .await
    .map_err(text)?;
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: v.volume_id,
        ..Default::default()
    })
    .await
    .map_err(text)?;
    Ok(())
}

fn controller(session: &Session) -> Controller {
    Controller::new(
        session.clone(),
        Arc::new(DriverConfig::new("ar", Default::default())),
    )
}

/// Every call but `(method, path)`.
fn without(method: &str, path: &str) -> Vec<Call> {
    let left: Vec<Call> = CALLS
        .iter()
        .filter(|c| !(c.method == method && c.path == path))
        .copied()
        .collect();
    assert_eq!(
        left.len(),
        CALLS.len() - 1,
        "{method} {path} is one of kos's calls"
    );
    left
}

fn is_401(e: &CloudErrorText) -> bool {
    e.0.contains("401")
}

#[tokio::test]
async fn kos_ccm_and_kos_csi_work_with_exactly_kos_rules() -> R {
    let c = cloud().await?;
    let rules = rules_for(&c.admin, CALLS).await;
    // Every service kos-ccm and kos-csi call is in the simulated catalog (Cinder under two types).
    assert!(rules.iter().any(|r| r.service == "load-balancer"));
    assert!(rules.iter().any(|r| r.service == "volumev3"));
    let session = c.session_with("kos-ar-ccm", rules).await?;

    let lbs = c.ccm(&session, "ar")?;
    let before = c.sim.app().observations().log.len();
    lb_flow(&lbs, &c.nodes).await.map_err(|e| e.0)?;
    assert_eq!(c.lb_count().await?, 0, "the load balancer is deleted");
    csi_flow(&controller(&session), &c.server)
        .await
        .map_err(|e| e.0)?;
    // Nothing was refused on the way (a refused call that kos-ccm retried would not fail it).
    let refused: Vec<String> = c
        .sim
        .app()
        .observations()
        .log
        .iter()
        .skip(before)
        .filter(|e| e.status == 401)
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
    Ok(())
}

#[tokio::test]
async fn without_the_load_balancer_create_rule_kos_ccm_gets_the_401() -> R {
    let c = cloud().await?;
    let rules = rules_for(&c.admin, &without("POST", "lbaas/loadbalancers")).await;
    let session = c.session_with("kos-ar-nolb", rules).await?;
    let e = lb_flow(&c.ccm(&session, "ar")?, &c.nodes)
        .await
        .expect_err("Octavia refuses the create");
    assert!(is_401(&e), "{e:?}");
    assert_eq!(c.lb_count().await?, 0);
    Ok(())
}

#[tokio::test]
async fn without_the_attach_rule_kos_csi_gets_the_401() -> R {
    let c = cloud().await?;
    let rules = rules_for(
        &c.admin,
        &without("POST", "servers/*/os-volume_attachments"),
    )
    .await;
    let session = c.session_with("kos-ar-noattach", rules).await?;
    let e = csi_flow(&controller(&session), &c.server)
        .await
        .expect_err("Nova refuses the attach");
    assert!(is_401(&e), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn with_a_service_that_has_no_service_type_everything_there_is_refused() -> R {
    // The cloud kos cannot detect: Cinder's keystonemiddleware lacks service_type.
    let sim = Sim::start(SimConfig {
        no_service_type: vec![kos_sim::Service::BlockStorage],
        ..SimConfig::fast()
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    let admin = Session::connect(&profile).await?;
    let rules = rules_for(&admin, CALLS).await;
    let roles = kos_cluster::credential::ccm_roles(&admin.token_roles())?;
    let mut req = kos_cluster::credential::request("x", "ar", &roles, 1, chrono::Utc::now());
    req.access_rules = rules;
    let cred = admin.identity().create_application_credential(&req).await?;
    let session = Session::connect(&CloudProfile {
        auth: ProfileAuth::ApplicationCredential {
            credential: AppCredentialRef::Id(cred.credential.id.clone()),
            secret: cred.secret.clone(),
        },
        ..profile
    })
    .await?
    .with_retry_policy(RetryPolicy::fast());
    let e = controller(&session)
        .create_volume(create_req("pvc-1"))
        .await
        .expect_err("Cinder refuses every token with rules");
    assert!(
        matches!(
            &e,
            CsiError::Cloud {
                source: CloudError::Api { status: 401, .. },
                ..
            }
        ),
        "{e:?}"
    );
    Ok(())
}
