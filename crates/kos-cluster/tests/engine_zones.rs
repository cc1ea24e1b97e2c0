//! Boot volumes on a cloud whose Cinder zones are not Nova's (compute zones `az1, az2`, one volume
//! zone `nova`, as many real clouds have): preflight lists Cinder's zones, each volume goes to `nova`
//! while its server goes to its compute zone, the plan says so, and the cluster converges. Before,
//! each volume was asked for in its server's compute zone and Cinder refused it.

mod engine_support;

use engine_support::*;
use kos_cluster::bootstrap::Formation;
use kos_cluster::graph::{Desired, desired};
use kos_cluster::preflight::preflight;
use kos_sim::SimConfig;

const SPEC: &str = "apiVersion: kos.dev/v1alpha1
kind: Cluster
metadata:
  name: zones
spec:
  kubernetesVersion: \"1.36.4\"
  network:
    create:
      cidr: 10.0.0.0/24
  apiEndpoint:
    type: floatingIP
  controlPlane:
    count: 1
    flavor: m1.medium
    image: ubuntu-24.04
    bootVolume: {sizeGB: 20}
    availabilityZones: [az1, az2]
  nodePools:
    - name: workers
      count: 2
      flavor: m1.small
      image: ubuntu-24.04
      bootVolume: {sizeGB: 20}
      availabilityZones: [az1, az2]
";

fn split_zones() -> SimConfig {
    SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        volume_zones: vec!["nova".into()],
        ..SimConfig::fast()
    }
}

#[tokio::test]
async fn boot_volumes_go_to_cinders_zone_when_it_lacks_the_compute_zones() -> R {
    let c = start_with(split_zones()).await?;
    let spec = kos_cluster::load("cluster.yaml", SPEC)
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?
        .spec;
    let p = preflight(&c.session, &spec, "cluster.yaml", SPEC)
        .await
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
    let g = desired(&spec, &p.resolved, Formation::Fresh)?;
    for (vol, server, compute) in [
        ("vol-cp-0", "cp-0", "az1"),
        ("vol-workers-0", "workers-0", "az1"),
        ("vol-workers-1", "workers-1", "az2"),
    ] {
        let Some(Desired::Volume {
            availability_zone, ..
        }) = g.node(vol).map(|n| &n.spec)
        else {
            return Err(format!("{vol} is not a volume").into());
        };
        assert_eq!(availability_zone.as_deref(), Some("nova"), "{vol}");
        let Some(Desired::Server(s)) = g.node(server).map(|n| &n.spec) else {
            return Err(format!("{server} is not a server").into());
        };
        assert_eq!(s.availability_zone.as_deref(), Some(compute), "{server}");
    }

    // The plan states the cross-zone attach it asks Nova for.
    let first = plan_for(&c.session, &g).await?;
    let vol = first.for_node("vol-workers-1").ok_or("no volume action")?;
    assert!(
        vol.changes
            .iter()
            .any(|l| l.contains("in Cinder zone nova, its server in compute zone az2")),
        "{:?}",
        vol.changes
    );

    converge(&c.session, &g, 3).await?;
    assert_eq!(pending(&c.session, &g).await?, 0);
    {
        let cloud = c.sim.app().cloud();
        let zones: Vec<&str> = cloud
            .cinder
            .volumes
            .iter()
            .map(|v| v.availability_zone.as_str())
            .collect();
        assert_eq!(zones, ["nova"; 3]);
        let mut servers: Vec<(&str, &str)> = cloud
            .nova
            .servers
            .iter()
            .map(|s| (s.name.as_str(), s.availability_zone.as_str()))
            .collect();
        servers.sort_unstable();
        assert_eq!(
            servers,
            [
                ("kos-zones-cp-0", "az1"),
                ("kos-zones-workers-0", "az1"),
                ("kos-zones-workers-1", "az2"),
            ]
        );
    }
    down(&c.session, "zones").await
}

/// Where Cinder's zones are the compute zones' names, each volume stays with its server.
#[tokio::test]
async fn boot_volumes_follow_their_server_where_cinder_has_its_zone() -> R {
    let c = start_with(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        ..SimConfig::fast()
    })
    .await?;
    let spec = kos_cluster::load("cluster.yaml", SPEC)
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?
        .spec;
    let p = preflight(&c.session, &spec, "cluster.yaml", SPEC)
        .await
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
    let g = desired(&spec, &p.resolved, Formation::Fresh)?;
    let zone = |id: &str| match g.node(id).map(|n| &n.spec) {
        Some(Desired::Volume {
            availability_zone, ..
        }) => availability_zone.clone(),
        _ => None,
    };
    assert_eq!(zone("vol-workers-0").as_deref(), Some("az1"));
    assert_eq!(zone("vol-workers-1").as_deref(), Some("az2"));
    Ok(())
}
