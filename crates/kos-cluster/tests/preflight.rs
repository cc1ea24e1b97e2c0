//! Preflight against kos-sim: the examples resolve, a catalogue of cloud conditions each yields its specific
//! diagnostic, nothing is ever created, and quota is not counted twice for a half-built cluster.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;
use kos_cloud::model::TagQuery;
use kos_cloud::model::network::{
    NetworkCreate, NetworkFilter, PortCreate, RouterCreate, SecurityGroupCreate, Subnet,
    SubnetCreate,
};
use kos_cloud::{ApiRequest, CloudProfile, Env, RetryPolicy, ServiceKind, Session};
use kos_cluster::observe::observe_listed;
use kos_cluster::preflight::{Preflight, PreflightError, Resource, preflight, preflight_listed};
use kos_cluster::resolved::{ExternalNetwork, Resolved, ResolvedMachine, ResolvedNetwork};
use kos_cluster::{Code, Severity, load};
use kos_sim::{FaultRule, Service, Sim, SimConfig};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;
type E = Box<dyn std::error::Error>;

struct Cloud {
    sim: Sim,
    session: Session,
    _dir: tempfile::TempDir,
}

async fn start() -> Result<Cloud, E> {
    start_with(SimConfig {
        // The fast clock runs ~1000x real time: a default token would expire within seconds.
        token_lifetime_secs: 1e9,
        ..SimConfig::fast()
    })
    .await
}

async fn start_with(cfg: SimConfig) -> Result<Cloud, E> {
    let sim = Sim::start(cfg).await?;
    let dir = tempfile::tempdir()?;
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    let session = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    Ok(Cloud {
        sim,
        session,
        _dir: dir,
    })
}

fn example(name: &str) -> Result<String, E> {
    let path = format!(
        "{}/../../examples/{name}",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    );
    Ok(std::fs::read_to_string(path)?)
}

/// The minimal example with `(from, to)` replacements, each of which must apply exactly once.
fn minimal_with(edits: &[(&str, &str)]) -> Result<String, E> {
    edit(&example("minimal.yaml")?, edits)
}

fn edit(text: &str, edits: &[(&str, &str)]) -> Result<String, E> {
    edits.iter().try_fold(text.to_owned(), |t, (from, to)| {
        if t.matches(from).count() == 1 {
            Ok(t.replacen(from, to, 1))
        } else {
            Err(format!("`{from}` must occur exactly once").into())
        }
    })
}

impl Cloud {
    /// Loads and preflights `text`, and checks that preflight sent nothing but GETs.
    async fn run(&self, text: &str) -> Result<Result<Preflight, PreflightError>, E> {
        let spec = load("cluster.yaml", text)
            .map_err(|r| format!("invalid spec: {r:?}"))?
            .spec;
        let before = self.last_seq();
        let out = preflight(&self.session, &spec, "cluster.yaml", text).await;
        let writes: Vec<String> = self
            .sim
            .app()
            .observations()
            .log
            .iter()
            .filter(|e| e.seq > before && e.method != "GET" && e.service != Some(Service::Identity))
            .map(|e| format!("{} {}", e.method, e.path))
            .collect();
        assert!(writes.is_empty(), "preflight changed the cloud: {writes:?}");
        Ok(out)
    }

    /// Preflight must fail; its report.
    async fn fails(&self, text: &str) -> Result<PreflightError, E> {
        match self.run(text).await? {
            Ok(p) => Err(format!("preflight passed: {:?}", p.resolved).into()),
            Err(e) => Ok(e),
        }
    }

    fn last_seq(&self) -> u64 {
        self.sim
            .app()
            .observations()
            .log
            .back()
            .map_or(0, |e| e.seq)
    }

    fn public_id(&self) -> String {
        let cloud = self.sim.app().cloud();
        cloud
            .neutron
            .networks
            .iter()
            .find(|n| n.m.name == "public")
            .map(|n| n.m.id.clone())
            .unwrap_or_default()
    }

    fn image_id(&self, name: &str) -> String {
        let cloud = self.sim.app().cloud();
        cloud
            .glance
            .images
            .iter()
            .find(|i| i.name.as_deref() == Some(name))
            .map(|i| i.id.clone())
            .unwrap_or_default()
    }

    /// An operator-made flavor (members cannot create flavors).
    fn add_flavor(
        &self,
        id: &str,
        name: &str,
        vcpus: u32,
        ram_mb: u64,
        disk_gb: u64,
    ) -> Result<(), E> {
        let mut cloud = self.sim.app().cloud();
        let mut f = cloud.nova.flavors.first().cloned().ok_or("no flavors")?;
        (f.id, f.name, f.vcpus, f.ram_mb, f.disk_gb) =
            (id.into(), name.into(), vcpus, ram_mb, disk_gb);
        cloud.nova.flavors.push(f);
        Ok(())
    }

    fn quotas(&self, set: impl FnOnce(&mut kos_sim::Quotas)) {
        set(&mut self.sim.app().cloud().quotas);
    }

    /// A user's network with one subnet, optionally on a router with a gateway on `public`.
    async fn user_network(
        &self,
        name: &str,
        cidr: &str,
        router: Option<&str>,
    ) -> Result<Subnet, E> {
        let n = self.session.network();
        let net = n
            .create_network(&NetworkCreate {
                name: name.into(),
                ..Default::default()
            })
            .await?;
        let sub = n
            .create_subnet(&SubnetCreate::new(&net.id, format!("{name}-subnet"), cidr))
            .await?;
        if let Some(r) = router {
            let r = n
                .create_router(&RouterCreate::with_gateway(r, self.public_id()))
                .await?;
            n.add_router_interface(&r.id, &sub.id).await?;
        }
        Ok(sub)
    }
}

/// The one diagnostic with `code`, which must be an error containing `text`.
fn expect(e: &PreflightError, code: Code, text: &str) {
    let found: Vec<_> = e
        .report
        .diagnostics()
        .iter()
        .filter(|d| d.code == code)
        .collect();
    assert!(
        found
            .iter()
            .any(|d| d.severity == Severity::Error && d.message.contains(text)),
        "no {code} error containing {text:?}; got {:#?}",
        e.report.diagnostics()
    );
}

fn m(flavor: (&str, &str, u32, u64, u64), image_id: &str) -> ResolvedMachine {
    ResolvedMachine {
        flavor_id: flavor.0.into(),
        flavor_name: flavor.1.into(),
        vcpus: flavor.2,
        ram_mb: flavor.3,
        disk_gb: flavor.4,
        image_id: image_id.into(),
        availability_zones: Vec::new(),
        boot_volume: None,
    }
}

const MEDIUM: (&str, &str, u32, u64, u64) = ("3", "m1.medium", 2, 4096, 40);
const LARGE: (&str, &str, u32, u64, u64) = ("4", "m1.large", 4, 8192, 80);

// ---------------------------------------------------------------- the examples

#[tokio::test]
async fn minimal_example_resolves() -> R {
    let c = start().await?;
    let p = c
        .run(&example("minimal.yaml")?)
        .await?
        .map_err(|e| format!("{:?}", e.report))?;
    let ubuntu = c.image_id("ubuntu-24.04");
    let want = Resolved {
        external_network: ExternalNetwork {
            id: c.public_id(),
            name: "public".into(),
        },
        network: ResolvedNetwork::Create {
            cidr: "10.0.0.0/24".parse::<Ipv4Net>()?,
            dns_servers: Vec::new(),
        },
        control_plane: m(MEDIUM, &ubuntu),
        pools: BTreeMap::from([(
            kos_cluster::names::PoolName::new("workers")?,
            m(MEDIUM, &ubuntu),
        )]),
        lb_provider: None,
        service_lb_provider: None,
        // The simulated user's roles: member (implying reader), load-balancer_member, creator.
        ccm_roles: vec!["member".into(), "load-balancer_member".into()],
        csi_volume_zone: None,
    };
    assert_eq!(p.resolved, want);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let instances = p.quota.row(Resource::Instances).ok_or("no instances row")?;
    assert_eq!((instances.need, instances.limit), (3, Some(10)));
    assert_eq!(p.quota.row(Resource::FloatingIps).map(|r| r.need), Some(1));
    Ok(())
}

/// The cloud a newcomer tries the examples on (`--cloud sim`): the demo profile.
async fn start_demo() -> Result<Cloud, E> {
    start_with(SimConfig {
        token_lifetime_secs: 1e9,
        ..SimConfig {
            time_scale: 0.001,
            latency: kos_sim::LatencyModel::instant(),
            ..SimConfig::demo()
        }
    })
    .await
}

#[tokio::test]
async fn ha_example_resolves_on_the_demo_cloud_as_written() -> R {
    let c = start_demo().await?;
    let p = c
        .run(&example("ha.yaml")?)
        .await?
        .map_err(|e| format!("{:?}", e.report))?;
    let r = &p.resolved;
    let ubuntu = c.image_id("ubuntu-24.04");
    assert_eq!(r.lb_provider.as_deref(), Some("amphora"));
    assert_eq!(r.service_lb_provider.as_deref(), Some("amphora"));
    assert_eq!(r.external_network.name, "public");
    assert_eq!(r.control_plane.flavor_name, "m1.large");
    assert_eq!(r.control_plane.image_id, ubuntu);
    assert_eq!(r.control_plane.availability_zones, ["az1", "az2", "az3"]);
    let bv = r
        .control_plane
        .boot_volume
        .as_ref()
        .ok_or("no boot volume")?;
    assert_eq!((bv.size_gb, bv.volume_type.as_deref()), (50, Some("ssd")));
    let batch = r
        .pools
        .get(&kos_cluster::names::PoolName::new("batch")?)
        .ok_or("no batch pool")?;
    assert_eq!((batch.flavor_name.as_str(), batch.vcpus), ("m1.xlarge", 8));
    assert!(matches!(r.network, ResolvedNetwork::Create { .. }));
    let gb = p.quota.row(Resource::Gigabytes).ok_or("no gigabytes row")?;
    assert_eq!(gb.need, 3 * 50 + 3 * 100);
    Ok(())
}

#[tokio::test]
async fn byo_network_example_resolves_to_the_demo_clouds_project_network() -> R {
    let c = start_demo().await?;
    let p = c
        .run(&example("byo-network.yaml")?)
        .await?
        .map_err(|e| format!("{:?}", e.report))?;
    let n = c.session.network();
    let subnet = n
        .list_subnets(&Default::default())
        .await?
        .into_iter()
        .find(|s| s.name == "private-subnet")
        .ok_or("no private-subnet")?;
    let router = n
        .list_routers(&Default::default())
        .await?
        .into_iter()
        .find(|r| r.name == "router1")
        .ok_or("no router1")?;
    let gateway = router
        .external_gateway_info
        .as_ref()
        .and_then(|g| g.external_fixed_ips.first())
        .map(|f| f.ip_address.clone());
    assert!(
        gateway
            .as_deref()
            .is_some_and(|g| g.starts_with("172.24.4."))
    );
    assert_eq!(
        p.resolved.network,
        ResolvedNetwork::Existing {
            network_id: subnet.network_id.clone(),
            subnet_id: subnet.id.clone(),
            subnet_cidr: "10.10.0.0/24".parse()?,
            router_id: Some(router.id),
            router_gateway: gateway,
        }
    );
    assert_eq!(p.resolved.lb_provider.as_deref(), Some("ovn"));
    assert_eq!(p.resolved.service_lb_provider.as_deref(), Some("ovn"));
    assert_eq!(
        p.resolved.control_plane,
        m(LARGE, &c.image_id("ubuntu-24.04"))
    );
    // The external network comes from the router's gateway; a private endpoint needs no floating IP.
    assert_eq!(p.resolved.external_network.name, "public");
    assert_eq!(p.quota.row(Resource::FloatingIps), None);
    assert_eq!(p.quota.row(Resource::Networks), None);
    Ok(())
}

// ---------------------------------------------------------------- the catalogue

#[tokio::test]
async fn missing_image() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-99.04\n  nodePools",
        )])?)
        .await?;
    expect(&e, Code::ImageNotFound, "no image is named `ubuntu-99.04`");
    let d = e.report.errors().next().ok_or("no error")?;
    let span = d.primary_span().ok_or("no label")?;
    assert_eq!(
        e.report.line_col(span.offset()).0,
        18,
        "points at the control plane's image line"
    );
    Ok(())
}

#[tokio::test]
async fn ambiguous_image_names_both_and_asks_for_the_id() -> R {
    let c = start().await?;
    c.session
        .send(ApiRequest::post(
            ServiceKind::Image,
            "image.create",
            "images",
            json!({"name": "ubuntu-24.04", "disk_format": "qcow2", "container_format": "bare"}),
        ))
        .await?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(&e, Code::ImageAmbiguous, "2 images named `ubuntu-24.04`");
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::ImageAmbiguous)
        .ok_or("none")?;
    assert!(d.help.as_deref().is_some_and(|h| h.contains("use the id")));
    assert_eq!(d.labels.len(), 2, "one label per use of the image");
    Ok(())
}

#[tokio::test]
async fn missing_flavor_lists_the_flavors() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "    flavor: m1.medium\n    image",
            "    flavor: m1.huge\n    image",
        )])?)
        .await?;
    expect(
        &e,
        Code::FlavorNotFound,
        "no flavor has the name or id `m1.huge`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::FlavorNotFound)
        .ok_or("none")?;
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("m1.large (4 vCPUs, 8192 MiB RAM, 80 GB disk)"))
    );
    Ok(())
}

#[tokio::test]
async fn control_plane_flavor_below_kubeadms_minimum() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "    flavor: m1.medium\n    image",
            "    flavor: m1.small\n    image",
        )])?)
        .await?;
    expect(
        &e,
        Code::FlavorTooSmall,
        "flavor `m1.small` has 1 vCPU and 2048 MiB RAM",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::FlavorTooSmall)
        .ok_or("none")?;
    assert!(d.help.as_deref().is_some_and(|h| h.contains("`m1.medium`")));
    Ok(())
}

#[tokio::test]
async fn flavor_without_a_root_disk_needs_a_boot_volume() -> R {
    let c = start().await?;
    c.add_flavor("d0", "m1.diskless", 2, 4096, 0)?;
    let text = minimal_with(&[(
        "    flavor: m1.medium\n    image",
        "    flavor: m1.diskless\n    image",
    )])?;
    let e = c.fails(&text).await?;
    expect(
        &e,
        Code::FlavorTooSmall,
        "flavor `m1.diskless` has no root disk",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::FlavorTooSmall)
        .ok_or("none")?;
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("bootVolume: {sizeGB: 50}"))
    );
    // With a boot volume it is fine.
    let text = minimal_with(&[(
        "    flavor: m1.medium\n    image: ubuntu-24.04\n",
        "    flavor: m1.diskless\n    image: ubuntu-24.04\n    bootVolume: {sizeGB: 40}\n",
    )])?;
    let p = c.run(&text).await?.map_err(|e| format!("{:?}", e.report))?;
    assert_eq!(p.resolved.control_plane.disk_gb, 0);
    assert_eq!(p.quota.row(Resource::Gigabytes).map(|r| r.need), Some(40));
    Ok(())
}

#[tokio::test]
async fn image_that_needs_a_bigger_disk() -> R {
    let c = start().await?;
    for i in &mut c.sim.app().cloud().glance.images {
        i.min_disk = 60;
    }
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(
        &e,
        Code::ImageUnusable,
        "needs a 60 GB root disk; flavor `m1.medium` has 40 GB",
    );
    Ok(())
}

#[tokio::test]
async fn named_external_network_that_does_not_exist() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "      cidr: 10.0.0.0/24\n",
            "      cidr: 10.0.0.0/24\n    externalNetwork: nowhere\n",
        )])?)
        .await?;
    expect(
        &e,
        Code::ExternalNetworkNotFound,
        "no network is named `nowhere`",
    );
    Ok(())
}

#[tokio::test]
async fn named_external_network_that_is_not_external() -> R {
    let c = start().await?;
    c.user_network("corp", "192.168.7.0/24", None).await?;
    let e = c
        .fails(&minimal_with(&[(
            "      cidr: 10.0.0.0/24\n",
            "      cidr: 10.0.0.0/24\n    externalNetwork: corp\n",
        )])?)
        .await?;
    expect(
        &e,
        Code::ExternalNetworkNotFound,
        "network `corp` is not external",
    );
    Ok(())
}

#[tokio::test]
async fn several_external_networks_and_none_named() -> R {
    let c = start().await?;
    {
        let mut cloud = c.sim.app().cloud();
        let mut second = cloud
            .neutron
            .networks
            .first()
            .cloned()
            .ok_or("no network")?;
        (second.m.id, second.m.name) = (
            "6c0e3f1a-0000-4000-8000-00000000e2e2".into(),
            "public-2".into(),
        );
        cloud.neutron.networks.push(second);
    }
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(
        &e,
        Code::ExternalNetworkAmbiguous,
        "2 external networks and the spec names none",
    );
    assert!(
        e.report
            .diagnostics()
            .iter()
            .any(|d| d.message.contains("public-2"))
    );
    Ok(())
}

#[tokio::test]
async fn missing_availability_zone() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-24.04\n    availabilityZones: [nova, az9]\n  nodePools",
        )])?)
        .await?;
    expect(&e, Code::AzNotFound, "no availability zone is named `az9`");
    Ok(())
}

#[tokio::test]
async fn a_cloud_without_the_zone_api_warns_and_passes() -> R {
    let c = start().await?;
    c.sim
        .app()
        .fault_engine()
        .add(serde_json::from_value::<FaultRule>(
            json!({"path": "^/compute/v2.1/os-availability-zone$", "status": 404}),
        )?)?;
    let text = minimal_with(&[(
        "    image: ubuntu-24.04\n  nodePools",
        "    image: ubuntu-24.04\n    availabilityZones: [az9]\n  nodePools",
    )])?;
    let p = c.run(&text).await?.map_err(|e| format!("{:?}", e.report))?;
    assert!(p.warnings.warnings().any(|d| d.code == Code::AzUnchecked));
    Ok(())
}

#[tokio::test]
async fn missing_volume_type() -> R {
    let c = start().await?;
    let e = c
        .fails(&minimal_with(&[(
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-24.04\n    bootVolume: {sizeGB: 40, type: nvme}\n  nodePools",
        )])?)
        .await?;
    expect(
        &e,
        Code::VolumeTypeNotFound,
        "no volume type is named `nvme`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::VolumeTypeNotFound)
        .ok_or("none")?;
    assert!(d.help.as_deref().is_some_and(|h| h.contains("ssd")));
    Ok(())
}

/// Compute zones `az1, az2` and one Cinder zone `nova`: a boot volume named into a compute zone is
/// refused before anything is made, naming the field and the zones Cinder has.
#[tokio::test]
async fn a_boot_volume_zone_cinder_lacks_names_cinders_zones() -> R {
    let c = start_with(SimConfig {
        token_lifetime_secs: 1e9,
        zones: vec!["az1".into(), "az2".into()],
        volume_zones: vec!["nova".into()],
        ..SimConfig::fast()
    })
    .await?;
    let e = c
        .fails(&minimal_with(&[(
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-24.04\n    bootVolume: {sizeGB: 40, availabilityZone: az1}\n    \
             availabilityZones: [az1]\n  nodePools",
        )])?)
        .await?;
    expect(
        &e,
        Code::AzNotFound,
        "spec.controlPlane.bootVolume.availabilityZone: Cinder has no availability zone named `az1`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::AzNotFound)
        .ok_or("none")?;
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("one of Cinder's zones: nova")),
        "{:?}",
        d.help
    );
    {
        let cloud = c.sim.app().cloud();
        assert!(
            cloud.cinder.volumes.is_empty() && cloud.nova.servers.is_empty(),
            "nothing is made"
        );
    }

    // Cinder's own zone is fine, and so is leaving it out.
    for boot in [
        "bootVolume: {sizeGB: 40, availabilityZone: nova}",
        "bootVolume: {sizeGB: 40}",
    ] {
        let with = format!(
            "    image: ubuntu-24.04\n    {boot}\n    availabilityZones: [az1]\n  nodePools"
        );
        let text = minimal_with(&[("    image: ubuntu-24.04\n  nodePools", with.as_str())])?;
        let p = c.run(&text).await?.map_err(|e| format!("{:?}", e.report))?;
        let bv = p
            .resolved
            .control_plane
            .boot_volume
            .as_ref()
            .ok_or("no boot volume")?;
        assert_eq!(bv.zone_for(Some("az1")).as_deref(), Some("nova"), "{boot}");
    }
    Ok(())
}

/// A Cinder that does not list its zones: a warning; volumes keep their server's zone.
#[tokio::test]
async fn a_cinder_without_the_zone_api_warns_and_passes() -> R {
    let c = start().await?;
    c.sim
        .app()
        .fault_engine()
        .add(serde_json::from_value::<FaultRule>(
            json!({"path": "^/volume/v3/[^/]+/os-availability-zone$", "status": 403}),
        )?)?;
    let text = minimal_with(&[(
        "    image: ubuntu-24.04\n  nodePools",
        "    image: ubuntu-24.04\n    bootVolume: {sizeGB: 40}\n  nodePools",
    )])?;
    let p = c.run(&text).await?.map_err(|e| format!("{:?}", e.report))?;
    assert!(
        p.warnings
            .warnings()
            .any(|d| d.code == Code::AzUnchecked && d.message.contains("Cinder"))
    );
    let bv = p
        .resolved
        .control_plane
        .boot_volume
        .as_ref()
        .ok_or("no boot volume")?;
    assert_eq!(bv.cinder_zones, None);
    Ok(())
}

/// `(network, subnet, router)` lines for a bring-your-own spec with a private load-balancer endpoint.
fn byo(network: &str, subnet: &str, router: Option<&str>, public: bool) -> Result<String, E> {
    let router = router.map_or(String::new(), |r| format!("      router: {r}\n"));
    minimal_with(&[
        (
            "    create:\n      cidr: 10.0.0.0/24\n",
            &format!("    existing:\n      network: {network}\n      subnet: {subnet}\n{router}"),
        ),
        (
            "    type: floatingIP\n",
            &format!("    type: loadBalancer\n    public: {public}\n"),
        ),
    ])
}

#[tokio::test]
async fn byo_subnet_on_another_network() -> R {
    let c = start().await?;
    c.user_network("net-a", "10.10.0.0/24", None).await?;
    c.user_network("net-b", "10.11.0.0/24", None).await?;
    let e = c.fails(&byo("net-a", "net-b-subnet", None, false)?).await?;
    expect(
        &e,
        Code::ExistingNetwork,
        "subnet `net-b-subnet` (10.11.0.0/24) is on network `net-b`, not on `net-a`",
    );
    Ok(())
}

#[tokio::test]
async fn byo_subnet_overlapping_the_pod_range() -> R {
    let c = start().await?;
    c.user_network("corp", "10.244.1.0/24", Some("corp-router"))
        .await?;
    let e = c
        .fails(&byo("corp", "corp-subnet", Some("corp-router"), false)?)
        .await?;
    expect(
        &e,
        Code::CidrCollision,
        "the pod range 10.244.0.0/16 overlaps the nodes' subnet `corp-subnet`",
    );
    Ok(())
}

#[tokio::test]
async fn byo_public_endpoint_without_a_router() -> R {
    let c = start().await?;
    c.user_network("corp", "10.10.0.0/24", None).await?;
    let e = c.fails(&byo("corp", "corp-subnet", None, true)?).await?;
    expect(
        &e,
        Code::ExistingNetwork,
        "no router connects subnet `corp-subnet` to the external network",
    );
    Ok(())
}

#[tokio::test]
async fn byo_subnet_too_small_for_the_nodes() -> R {
    let c = start().await?;
    // A /29 hands out 5 addresses; the subnet's router interface takes one; 3 nodes and a VIP need 4 more.
    c.user_network("tiny", "10.10.0.0/29", Some("tiny-router"))
        .await?;
    let text =
        byo("tiny", "tiny-subnet", Some("tiny-router"), false)?.replace("count: 2", "count: 4");
    let e = c.fails(&text).await?;
    expect(
        &e,
        Code::SubnetFull,
        "has 4 free addresses and this cluster needs 6",
    );
    Ok(())
}

#[tokio::test]
async fn node_cidr_colliding_with_a_routed_subnet() -> R {
    let c = start().await?;
    c.user_network("legacy", "10.0.0.0/24", Some("legacy-router"))
        .await?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(
        &e,
        Code::CidrCollision,
        "the nodes' subnet 10.0.0.0/24 overlaps subnet `legacy-subnet` (10.0.0.0/24) on router `legacy-router`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::CidrCollision)
        .ok_or("none")?;
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("10.0.1.0/24")),
        "{:?}",
        d.help
    );
    Ok(())
}

#[tokio::test]
async fn pod_range_colliding_with_a_routed_subnet_is_a_warning() -> R {
    let c = start().await?;
    c.user_network("legacy", "10.244.3.0/24", Some("legacy-router"))
        .await?;
    let p = c
        .run(&example("minimal.yaml")?)
        .await?
        .map_err(|e| format!("{:?}", e.report))?;
    let w = p
        .warnings
        .warnings()
        .find(|d| d.code == Code::CidrCollision)
        .ok_or("no warning")?;
    assert!(
        w.message
            .contains("the pod range 10.244.0.0/16 overlaps subnet `legacy-subnet`")
    );
    Ok(())
}

#[tokio::test]
async fn quota_short_for_instances_cores_and_ram_prints_a_table() -> R {
    let c = start().await?;
    c.quotas(|q| {
        q.instances = 2;
        q.cores = 4;
        q.ram_mb = 4096;
    });
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(&e, Code::QuotaShort, "instances short by 1");
    let table = e.quota.as_ref().ok_or("no quota table")?;
    let row = |r| table.row(r).map(|x| (x.need, x.in_use, x.limit, x.short()));
    assert_eq!(row(Resource::Instances), Some((3, 0, Some(2), 1)));
    assert_eq!(row(Resource::Cores), Some((6, 0, Some(4), 2)));
    assert_eq!(
        row(Resource::Ram),
        Some((3 * 4096, 0, Some(4096), 2 * 4096))
    );
    assert_eq!(table.rows.len(), 3, "only what is short: {table}");
    let text = table.to_string();
    assert!(
        text.starts_with("resource  |  need | in use | limit | short\n"),
        "{text}"
    );
    assert!(
        text.contains("RAM (MiB) | 12288 |      0 |  4096 |  8192"),
        "{text}"
    );
    Ok(())
}

/// Issue 12: a pool scaled to zero still has its server group; `kos plan` used to pass and `kos up` then
/// died on OverQuota after creating everything before it.
#[tokio::test]
async fn a_pool_of_zero_still_counts_its_server_group() -> R {
    let c = start().await?;
    c.quotas(|q| q.server_groups = 0);
    let e = c
        .fails(&minimal_with(&[("      count: 2\n", "      count: 0\n")])?)
        .await?;
    expect(&e, Code::QuotaShort, "server groups short by 1");
    Ok(())
}

#[tokio::test]
async fn no_floating_ip_quota() -> R {
    let c = start().await?;
    c.quotas(|q| q.floating_ips = 0);
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(&e, Code::QuotaShort, "floating IPs short by 1");
    let row = e
        .quota
        .as_ref()
        .and_then(|t| t.row(Resource::FloatingIps))
        .ok_or("no row")?;
    assert_eq!((row.need, row.limit), (1, Some(0)));
    Ok(())
}

#[tokio::test]
async fn unlimited_quota_reads_as_such() -> R {
    let c = start().await?;
    c.quotas(|q| q.cores = -1);
    let p = c
        .run(&example("minimal.yaml")?)
        .await?
        .map_err(|e| format!("{:?}", e.report))?;
    assert_eq!(p.quota.row(Resource::Cores).map(|r| r.limit), Some(None));
    assert!(p.quota.to_string().contains("unlimited"));
    Ok(())
}

#[tokio::test]
async fn a_failing_lookup_is_reported_with_the_other_problems() -> R {
    let c = start().await?;
    c.sim
        .app()
        .fault_engine()
        .add(serde_json::from_value::<FaultRule>(
            json!({"path": "^/network/v2.0/routers$", "status": 403}),
        )?)?;
    let e = c
        .fails(&minimal_with(&[(
            "    flavor: m1.medium\n    image",
            "    flavor: m1.huge\n    image",
        )])?)
        .await?;
    expect(&e, Code::CloudError, "could not list routers");
    expect(&e, Code::FlavorNotFound, "m1.huge");
    assert!(
        e.report.to_string().contains("is invalid: 2 errors"),
        "{}",
        e.report
    );
    Ok(())
}

/// Issue 12: a lookup the cloud failed (after the session's retries) is the cloud's failure, not the spec's:
/// the caller says "try again", not "your spec is invalid". A refusal (403) is not.
#[tokio::test]
async fn a_lookup_the_cloud_failed_marks_the_report_as_the_clouds_failure() -> R {
    let c = start().await?;
    c.sim
        .app()
        .fault_engine()
        .add(serde_json::from_value::<FaultRule>(
            json!({"path": "^/network/v2.0/routers$", "status": 503}),
        )?)?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(&e, Code::CloudError, "could not list routers");
    assert!(e.cloud_failed);
    // Nothing wrong was found in the spec: it is not called invalid.
    let header = e.report.to_string();
    assert!(
        header.ends_with("could not be checked against the cloud: 1 lookup failed"),
        "{header}"
    );
    let c = start().await?;
    c.sim
        .app()
        .fault_engine()
        .add(serde_json::from_value::<FaultRule>(
            json!({"path": "^/network/v2.0/routers$", "status": 403}),
        )?)?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    assert!(!e.cloud_failed);
    Ok(())
}

#[tokio::test]
async fn several_problems_are_reported_at_once() -> R {
    let c = start().await?;
    c.user_network("legacy", "10.0.0.0/24", Some("legacy-router"))
        .await?;
    c.quotas(|q| q.floating_ips = 0);
    let text = minimal_with(&[
        (
            "    flavor: m1.medium\n    image",
            "    flavor: m1.huge\n    image",
        ),
        (
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-99.04\n    availabilityZones: [az9]\n  nodePools",
        ),
        (
            "      cidr: 10.0.0.0/24\n",
            "      cidr: 10.0.0.0/24\n    externalNetwork: nowhere\n",
        ),
    ])?;
    let e = c.fails(&text).await?;
    let codes: Vec<Code> = e.report.errors().map(|d| d.code).collect();
    for code in [
        Code::FlavorNotFound,
        Code::ImageNotFound,
        Code::AzNotFound,
        Code::ExternalNetworkNotFound,
        Code::QuotaShort,
    ] {
        assert!(codes.contains(&code), "{code} missing from {codes:?}");
    }
    // In file order.
    let offsets: Vec<usize> = e
        .report
        .errors()
        .filter_map(|d| d.primary_span())
        .map(|s| s.offset())
        .collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{offsets:?}");
    Ok(())
}

// ---------------------------------------------------------------- a half-built cluster

#[tokio::test]
async fn existing_cluster_resources_are_not_counted_twice() -> R {
    let c = start().await?;
    let text = example("minimal.yaml")?;
    let before = c
        .run(&text)
        .await?
        .map_err(|e| format!("{:?}", e.report))?
        .quota;

    // What `kos up` would have made first: the tagged network and one node port.
    let tags = vec!["kos-cluster=demo".to_owned(), "kos-id=network".to_owned()];
    let n = c.session.network();
    let net = n
        .create_network(&NetworkCreate {
            name: "kos-demo-network".into(),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    n.create_subnet(&SubnetCreate {
        tags: tags.clone(),
        ..SubnetCreate::new(&net.id, "kos-demo-subnet", "10.0.0.0/24")
    })
    .await?;
    n.create_port(&PortCreate {
        tags: vec!["kos-cluster=demo".into(), "kos-id=control-plane-0".into()],
        ..PortCreate::new(&net.id, "kos-demo-control-plane-0")
    })
    .await?;
    let ours = n
        .list_networks(&NetworkFilter {
            tags: TagQuery::all(["kos-cluster=demo"]),
            ..Default::default()
        })
        .await?;
    assert_eq!(ours.len(), 1);

    let after = c
        .run(&text)
        .await?
        .map_err(|e| format!("{:?}", e.report))?
        .quota;
    for r in [Resource::Ports, Resource::Networks, Resource::Subnets] {
        let (b, a) = (before.row(r).ok_or("row")?, after.row(r).ok_or("row")?);
        assert!(a.in_use > b.in_use, "{r}: usage grew");
        assert_eq!(
            a.in_use + a.need,
            b.in_use + b.need,
            "{r}: counted once\n{before}\n{after}"
        );
    }
    assert_eq!(after.row(Resource::Networks).map(|r| r.need), Some(0));

    // And a quota that fits exactly what remains passes.
    let ports = after.row(Resource::Ports).ok_or("row")?;
    let limit = i64::try_from(ports.in_use + ports.need)?;
    c.quotas(|q| q.ports = limit);
    c.run(&text).await?.map_err(|e| format!("{:?}", e.report))?;
    Ok(())
}

/// A run observes the cluster and preflights it in one turn: preflight reads the observe's lists
/// (the project's networks, ports, …, the cluster's servers and groups) and asks for none again,
/// and finds what it finds alone, for a half-built cluster beside another cluster.
#[tokio::test]
async fn after_an_observe_preflight_lists_nothing_again_and_finds_the_same() -> R {
    let c = start().await?;
    c.user_network("legacy", "10.1.0.0/24", Some("legacy-router"))
        .await?;
    let n = c.session.network();
    let net = n
        .create_network(&NetworkCreate {
            name: "kos-demo-network".into(),
            tags: vec!["kos-cluster=demo".into(), "kos-id=network".into()],
            ..Default::default()
        })
        .await?;
    n.create_port(&PortCreate {
        tags: vec!["kos-cluster=demo".into(), "kos-id=control-plane-0".into()],
        ..PortCreate::new(&net.id, "kos-demo-control-plane-0")
    })
    .await?;
    // Security groups are counted per cluster: the other cluster's must not count as this one's.
    for (name, cluster) in [("kos-demo-nodes", "demo"), ("kos-other-nodes", "other")] {
        n.create_security_group(&SecurityGroupCreate {
            name: name.into(),
            description: None,
            tags: vec![format!("kos-cluster={cluster}"), "kos-id=nodes-sg".into()],
        })
        .await?;
    }
    let text = example("minimal.yaml")?;
    let spec = load("cluster.yaml", &text)
        .map_err(|r| format!("invalid spec: {r:?}"))?
        .spec;
    let alone = preflight(&c.session, &spec, "cluster.yaml", &text)
        .await
        .map_err(|e| format!("{:?}", e.report))?;

    let before = c.session.counters();
    let (_, listed) = observe_listed(&c.session, spec.name.value.as_str()).await?;
    let after = preflight_listed(&c.session, &spec, "cluster.yaml", &text, &listed)
        .await
        .map_err(|e| format!("{:?}", e.report))?;
    let calls = c.session.counters().since(&before);
    let repeated: Vec<_> = calls.by_operation.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "asked twice: {repeated:?}");
    assert_eq!(format!("{:?}", after.quota), format!("{:?}", alone.quota));
    assert_eq!(after.resolved, alone.resolved);
    Ok(())
}

#[tokio::test]
async fn each_lookup_is_one_call_and_the_report_renders() -> R {
    let c = start().await?;
    c.user_network("legacy", "10.0.0.0/24", Some("legacy-router"))
        .await?;
    c.quotas(|q| q.instances = 1);
    let before = c.session.counters();
    let text = minimal_with(&[(
        "    flavor: m1.medium\n    image",
        "    flavor: m1.huge\n    image",
    )])?;
    let e = c.fails(&text).await?;
    let calls = c.session.counters().since(&before);
    let repeated: Vec<_> = calls.by_operation.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "asked twice: {repeated:?}");
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .render_report(&mut out, &e)?;
    eprintln!("{out}");
    for code in [
        "kos::preflight::flavor_not_found",
        "kos::preflight::cidr_collision",
        "kos::preflight::quota_short",
    ] {
        assert!(out.contains(code), "{code} not rendered:\n{out}");
    }
    assert!(
        out.contains("flavor: m1.huge"),
        "the snippet shows the line:\n{out}"
    );
    Ok(())
}

#[tokio::test]
async fn a_user_without_a_member_role_is_refused_before_anything_is_made() -> R {
    let c = start_with(SimConfig {
        token_lifetime_secs: 1e9,
        user_roles: vec!["reader".into(), "load-balancer_member".into()],
        ..SimConfig::fast()
    })
    .await?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(
        &e,
        Code::CredentialRoles,
        "its token carries: reader, load-balancer_member",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::CredentialRoles)
        .ok_or("no error")?;
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("openstack role add")),
        "{d:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------- CSI volumes' Cinder zone

/// A cloud whose Nova has `zones` and whose Cinder has `volume_zones`.
async fn start_zoned(zones: &[&str], volume_zones: &[&str]) -> Result<Cloud, E> {
    let names = |z: &[&str]| z.iter().map(|s| (*s).to_owned()).collect();
    start_with(SimConfig {
        token_lifetime_secs: 1e9,
        zones: names(zones),
        volume_zones: names(volume_zones),
        ..SimConfig::fast()
    })
    .await
}

/// The minimal example with `addons:` lines added to its spec.
fn minimal_with_addons(addons: &str) -> Result<String, E> {
    minimal_with(&[(
        "  apiEndpoint:\n",
        &format!("  addons:\n{addons}  apiEndpoint:\n"),
    )])
}

/// The CSI volumes' zone preflight decided for `text`.
async fn csi_zone(c: &Cloud, text: &str) -> Result<Option<String>, E> {
    let p = c.run(text).await?.map_err(|e| format!("{}", e.report))?;
    Ok(p.resolved.csi_volume_zone)
}

#[tokio::test]
async fn csi_volumes_keep_their_nodes_zone_when_every_compute_zone_is_cinders() -> R {
    let c = start_zoned(&["az1", "az2"], &["az1", "az2", "archive"]).await?;
    assert_eq!(csi_zone(&c, &example("minimal.yaml")?).await?, None);
    // A CSI-less cluster decides nothing either.
    let none = minimal_with_addons("    csi: none\n")?;
    assert_eq!(csi_zone(&c, &none).await?, None);
    Ok(())
}

#[tokio::test]
async fn csi_volumes_go_to_cinders_only_zone_when_it_lacks_the_compute_zones() -> R {
    let c = start_zoned(&["az1", "az2", "az3"], &["nova"]).await?;
    assert_eq!(
        csi_zone(&c, &example("minimal.yaml")?).await?.as_deref(),
        Some("nova")
    );
    // kos-csi is the same driver, decided the same way.
    let kos =
        minimal_with_addons("    csi: {kos: {image: registry.example.com/kos/kos-csi:0.1.0}}\n")?;
    assert_eq!(csi_zone(&c, &kos).await?.as_deref(), Some("nova"));
    Ok(())
}

/// The zones the nodes may land in are the machines' `availabilityZones` when given: a compute
/// zone no machine uses does not count.
#[tokio::test]
async fn only_the_zones_the_machines_may_use_count() -> R {
    let c = start_zoned(&["az1", "az2"], &["az1", "nova"]).await?;
    let pinned = minimal_with(&[
        (
            "    image: ubuntu-24.04\n  nodePools",
            "    image: ubuntu-24.04\n    availabilityZones: [az1]\n  nodePools",
        ),
        (
            "      image: ubuntu-24.04\n",
            "      image: ubuntu-24.04\n      availabilityZones: [az1]\n",
        ),
    ])?;
    assert_eq!(csi_zone(&c, &pinned).await?, None);
    // Unpinned, the workers may land in az2, which Cinder lacks; Cinder has two zones: an error.
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(&e, Code::CsiZoneUnknown, "`az2`");
    Ok(())
}

#[tokio::test]
async fn several_cinder_zones_and_none_named_is_an_error_naming_the_field() -> R {
    let c = start_zoned(&["az1", "az2"], &["nova", "archive"]).await?;
    let e = c.fails(&example("minimal.yaml")?).await?;
    expect(
        &e,
        Code::CsiZoneUnknown,
        "spec.addons.csiAvailabilityZone: Cinder has no zone named as the compute zones `az1`, `az2`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::CsiZoneUnknown)
        .ok_or("no error")?;
    assert!(d.message.contains("(nova, archive)"), "{d:?}");
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("set `addons.csiAvailabilityZone`")
                && h.contains("one of: nova, archive")),
        "{d:?}"
    );
    assert!(
        e.report.to_string().contains("cluster.yaml"),
        "{}",
        e.report
    );

    // Naming one of Cinder's zones settles it.
    let named = minimal_with_addons("    csiAvailabilityZone: archive\n")?;
    assert_eq!(csi_zone(&c, &named).await?.as_deref(), Some("archive"));
    Ok(())
}

#[tokio::test]
async fn a_csi_zone_cinder_lacks_is_an_error_naming_cinders_zones() -> R {
    let c = start_zoned(&["az1", "az2"], &["nova", "archive"]).await?;
    let text = minimal_with_addons("    csiAvailabilityZone: az1\n")?;
    let e = c.fails(&text).await?;
    expect(
        &e,
        Code::AzNotFound,
        "spec.addons.csiAvailabilityZone: Cinder has no availability zone named `az1`",
    );
    let d = e
        .report
        .errors()
        .find(|d| d.code == Code::AzNotFound)
        .ok_or("no error")?;
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("one of Cinder's zones: nova, archive")),
        "{d:?}"
    );
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .render_report(&mut out, &e)?;
    assert!(
        out.contains("cluster.yaml") && out.contains("csiAvailabilityZone: az1"),
        "the report names the file and shows the line:\n{out}"
    );
    Ok(())
}

/// Only a cluster with a CSI driver asks for the zones (the example names none of its own).
#[tokio::test]
async fn a_spec_without_csi_asks_for_no_zones() -> R {
    let c = start_zoned(&["az1", "az2", "az3"], &["nova"]).await?;
    let zone_calls = |c: &Cloud, before: &kos_cloud::CallCounts| -> Vec<ServiceKind> {
        c.session
            .counters()
            .since(before)
            .by_operation
            .keys()
            .filter(|(_, op)| *op == "availability_zone.list")
            .map(|(s, _)| *s)
            .collect()
    };
    let before = c.session.counters();
    let none = minimal_with_addons("    csi: none\n")?;
    assert_eq!(csi_zone(&c, &none).await?, None);
    assert_eq!(zone_calls(&c, &before), Vec::new());

    let before = c.session.counters();
    csi_zone(&c, &example("minimal.yaml")?).await?;
    assert_eq!(zone_calls(&c, &before).len(), 2, "Nova's and Cinder's");
    Ok(())
}
