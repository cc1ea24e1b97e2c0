//! Engine on kos-sim: create from zero, no-op re-plans (and their constant cost), scale up and down,
//! teardown with the CCM's and CSI's run-time objects.

mod engine_support;

use std::collections::BTreeMap;

use engine_support::*;
use kos_cloud::model::block_storage::VolumeCreate;
use kos_cloud::model::load_balancer::{LoadBalancerCreate, Vip};
use kos_cloud::model::network::FloatingIpCreate;
use kos_cluster::graph::Kind;
use kos_cluster::observe::observe;
use kos_cluster::plan::{Op, plan};
use secrecy::ExposeSecret;

#[tokio::test]
async fn floating_ip_endpoint_from_zero_then_nothing_to_do() -> R {
    let c = start().await?;
    let g = graph(&c.session, &Shape::small("fip", 2)).await?;
    let first = plan_for(&c.session, &g).await?;
    assert_eq!(
        first.summary().create,
        g.nodes.len(),
        "{}",
        first.diff(false)
    );
    assert!(!format!("{:?}{}", first, first.diff(true)).contains("cloud-config"));

    let report = up(&c.session, &g).await?;
    let ccm = report.ccm_credential.as_ref().ok_or("no CCM credential")?;
    assert!(
        !ccm.secret
            .as_ref()
            .ok_or("no secret")?
            .expose_secret()
            .is_empty()
    );
    assert!(!format!("{report:?}").contains(ccm.secret.as_ref().ok_or("")?.expose_secret()));
    let api = report.api_address.clone().ok_or("no API address")?;
    assert!(api.starts_with("172.24.4."), "the public FIP: {api}");

    assert_eq!(pending(&c.session, &g).await?, 0);
    let again = up(&c.session, &g).await?;
    assert_eq!(again.changes(), 0);
    assert!(
        again.ccm_credential.is_none(),
        "adopted by name, secret not retrievable"
    );
    assert!(duplicates(&c.session, "fip").await?.is_empty());

    // The FIP points at the control plane's port.
    let o = observe(&c.session, "fip").await?;
    let port = o.get("port-cp-0")[0].id.clone();
    assert_eq!(
        o.get("fip-assoc")[0].facts.port_id.as_deref(),
        Some(port.as_str())
    );
    assert_eq!(
        o.get("sgr-node")[0].facts.rules.len(),
        4,
        "kubelet, NodePorts, CNI, SSH"
    );
    assert_eq!(
        o.get("sgr-cp")[0].facts.rules.len(),
        4,
        "API from anywhere, subnet, nodes; etcd"
    );
    let servers: Vec<_> = o.all().filter(|r| r.kind == Kind::Server).collect();
    assert_eq!(servers.len(), 3);
    assert!(servers.iter().all(|r| r.state == "ACTIVE" && r.tagged));
    let pairs = &o.get("port-workers-1")[0].facts.address_pairs;
    assert_eq!(pairs, &["10.244.0.0/16", "10.96.0.0/12"]);
    down(&c.session, "fip").await
}

#[tokio::test]
async fn ha_load_balancer_with_boot_volumes_from_zero_then_nothing_to_do() -> R {
    let c = start().await?;
    let shape = Shape {
        name: "ha",
        control_planes: 3,
        load_balancer: true,
        boot_volume: true,
        pools: vec![("workers", 2, "soft-anti-affinity")],
    };
    let g = graph(&c.session, &shape).await?;
    for id in [
        "api-lb",
        "api-listener",
        "api-pool",
        "api-monitor",
        "api-members",
        "vol-cp-2",
        "sgroup-cp",
        "keypair",
    ] {
        assert!(g.node(id).is_some(), "{id} missing from the graph");
    }
    assert!(g.dot().contains("\"api-monitor\" -> \"api-members\""));
    up(&c.session, &g).await?;
    assert_eq!(pending(&c.session, &g).await?, 0);

    let o = observe(&c.session, "ha").await?;
    let mut members = o.get("api-members")[0].facts.members.clone();
    let mut ports: Vec<String> = (0..3)
        .filter_map(|i| o.get(&format!("port-cp-{i}"))[0].facts.address.clone())
        .collect();
    members.sort();
    ports.sort();
    assert_eq!(members, ports, "members are the control planes' port IPs");
    let vip_port = o.get("api-lb")[0].facts.port_id.clone();
    assert_eq!(o.get("fip-assoc")[0].facts.port_id, vip_port);
    // allowedCIDRs restricts clients, not the nodes: kubelets reach the VIP from the node subnet and
    // the floating IP from the router's gateway (SNAT on the hairpin). Read both from the cloud itself.
    let router = c
        .session
        .network()
        .list_routers(&Default::default())
        .await?
        .into_iter()
        .find(|r| r.name == "kos-ha-router")
        .ok_or("no router")?;
    let gateway = router
        .external_gateway_info
        .and_then(|g| g.external_fixed_ips.into_iter().next())
        .map(|f| format!("{}/32", f.ip_address))
        .ok_or("router without gateway")?;
    let subnet = o.get("subnet")[0]
        .facts
        .address
        .clone()
        .ok_or("no subnet")?;
    let mut want = vec!["203.0.113.0/24".to_owned(), subnet, gateway.clone()];
    want.sort();
    assert_eq!(o.get("api-listener")[0].facts.allowed_cidrs, want);
    let cp_rules = &o.get("sgr-cp")[0].facts.rules;
    assert!(
        cp_rules
            .iter()
            .any(|r| r.remote_ip_prefix.as_deref() == Some(gateway.as_str())
                && r.ports == Some((6443, 6443))),
        "sg-cp admits the nodes' SNAT address: {cp_rules:?}"
    );

    // A changed listener CIDR list is an update, applied in place.
    let mut changed = shape.clone();
    changed.name = "ha";
    let spec_text = changed
        .yaml()
        .replace("[203.0.113.0/24]", "[203.0.113.0/24, 198.51.100.0/24]");
    let spec = kos_cluster::load("c.yaml", &spec_text)
        .map_err(|e| format!("{e:?}"))?
        .spec;
    let g2 = kos_cluster::graph::desired(
        &spec,
        &resolve(&c.session, &spec).await?,
        kos_cluster::bootstrap::Formation::Formed,
    )?;
    let p = plan_for(&c.session, &g2).await?;
    let listener = p.for_node("api-listener").ok_or("no listener action")?;
    assert_eq!(listener.op, Op::Update, "{}", p.diff(false));
    up(&c.session, &g2).await?;
    assert_eq!(pending(&c.session, &g2).await?, 0);
    down(&c.session, "ha").await
}

/// The cost of a no-op plan does not grow with the cluster: equal call counts for 3 and 30 workers.
#[tokio::test]
async fn noop_plan_costs_the_same_for_3_and_30_workers() -> R {
    let c = start().await?;
    let mut calls = Vec::new();
    for (name, workers) in [("small", 3), ("large", 30)] {
        let g = graph(&c.session, &Shape::small(name, workers)).await?;
        up(&c.session, &g).await?;
        let before = c.session.counters();
        let p = plan(&g, &observe(&c.session, name).await?);
        let cost = c.session.counters().since(&before);
        assert_eq!(p.summary().changes(), 0, "{}", p.diff(false));
        calls.push(cost.total());
    }
    assert_eq!(calls[0], calls[1], "no-op plan calls for 3 vs 30 workers");
    assert!((10..=20).contains(&calls[0]), "{} calls", calls[0]);
    Ok(())
}

#[tokio::test]
async fn scale_up_and_down_then_teardown_leaves_nothing() -> R {
    let c = start().await?;
    let s = &c.session;
    let mut shape = Shape::small("scale", 2);
    shape.boot_volume = true;
    up(s, &graph(s, &shape).await?).await?;

    shape.pools[0].1 = 4;
    let g = graph(s, &shape).await?;
    let p = plan_for(s, &g).await?;
    assert_eq!(
        p.summary().create,
        3 * 2,
        "a port, a volume and a server each: {}",
        p.diff(false)
    );
    up(s, &g).await?;
    let o = observe(s, "scale").await?;
    assert_eq!(o.all().filter(|r| r.kind == Kind::Server).count(), 5);

    shape.pools[0].1 = 1;
    let g = graph(s, &shape).await?;
    let p = plan_for(s, &g).await?;
    let mut gone: Vec<&str> = p.deletes().map(|a| a.logical_id.as_str()).collect();
    gone.sort_unstable();
    assert_eq!(
        gone,
        [
            "port-workers-1",
            "port-workers-2",
            "port-workers-3",
            "vol-workers-1",
            "vol-workers-2",
            "vol-workers-3",
            "workers-1",
            "workers-2",
            "workers-3"
        ],
        "the newest servers go, with their ports and volumes"
    );
    up(s, &g).await?;
    assert_eq!(pending(s, &g).await?, 0);
    let o = observe(s, "scale").await?;
    assert!(!o.get("workers-0").is_empty() && o.get("workers-1").is_empty());

    // What the CCM and the CSI driver make at run time.
    let subnet = o.get("subnet")[0].id.clone();
    let mut lb = LoadBalancerCreate::new("kube_service_scale_default_web", Vip::Subnet(subnet));
    lb.description = Some("Kubernetes external service default/web from cluster scale".into());
    s.load_balancer().create_load_balancer(&lb).await?;
    let ext = s.network().external_network(None).await?;
    s.network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: ext.id,
            description: Some(
                "Floating IP for Kubernetes external service default/web from cluster scale".into(),
            ),
            ..FloatingIpCreate::default()
        })
        .await?;
    s.block_storage()
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some("pvc-1234".into()),
            metadata: BTreeMap::from([("cinder.csi.openstack.org/cluster".into(), "scale".into())]),
            ..VolumeCreate::default()
        })
        .await?;
    let left = leftovers(s, "scale").await?;
    assert!(
        left.iter()
            .any(|l| l.contains("kube_service_scale_default_web")),
        "{left:#?}"
    );
    assert!(left.iter().any(|l| l.contains("pvc-1234")));
    down(s, "scale").await?;
    // Idempotent.
    down(s, "scale").await
}

/// Octavia writes of the run so far, as `METHOD /path-shape` (ids replaced).
fn octavia_writes(c: &Cloud) -> Vec<String> {
    c.sim
        .app()
        .observations()
        .log
        .iter()
        .filter(|e| e.service == Some(kos_sim::Service::LoadBalancer) && e.method != "GET")
        .map(|e| e.operation.clone())
        .collect()
}

/// A new API load balancer is one call: Octavia's fully populated create with the listener, pool,
/// monitor and the control planes as members; its children are found by their tags and a second plan
/// is a no-op. A listener lost later is made again one object at a time.
#[tokio::test]
async fn the_api_load_balancer_is_created_fully_populated_in_one_call() -> R {
    let c = start().await?;
    let shape = Shape {
        name: "pop",
        control_planes: 3,
        load_balancer: true,
        boot_volume: false,
        pools: vec![("workers", 1, "soft-anti-affinity")],
    };
    let g = graph(&c.session, &shape).await?;
    up(&c.session, &g).await?;
    let writes = octavia_writes(&c);
    assert_eq!(
        writes,
        vec!["POST /load-balancer/v2/lbaas/loadbalancers".to_owned()],
        "one create, no child created one by one"
    );
    assert_eq!(pending(&c.session, &g).await?, 0);
    let o = observe(&c.session, "pop").await?;
    for id in ["api-listener", "api-pool", "api-monitor"] {
        assert_eq!(o.get(id).len(), 1, "{id} found by its tags");
    }
    assert_eq!(o.get("api-members")[0].facts.members.len(), 3);

    // A listener deleted by hand (its pool, monitor and members go with it): the LB exists, so the
    // children come back one at a time.
    let listener = o.get("api-listener")[0].id.clone();
    let lbapi = c.session.load_balancer();
    let pool = o.get("api-pool")[0].id.clone();
    lbapi.delete_pool(&pool).await?;
    wait_lb_active(&c, &o.get("api-lb")[0].id).await?;
    lbapi.delete_listener(&listener).await?;
    wait_lb_active(&c, &o.get("api-lb")[0].id).await?;
    up(&c.session, &g).await?;
    assert_eq!(pending(&c.session, &g).await?, 0);
    let writes = octavia_writes(&c);
    for op in [
        "POST /load-balancer/v2/lbaas/listeners",
        "POST /load-balancer/v2/lbaas/pools",
        "POST /load-balancer/v2/lbaas/healthmonitors",
    ] {
        assert!(writes.iter().any(|w| w == op), "{op} in {writes:?}");
    }
    down(&c.session, "pop").await
}

async fn wait_lb_active(c: &Cloud, id: &str) -> R {
    for _ in 0..400 {
        let lb = c.session.load_balancer().get_load_balancer(id).await?;
        if lb.is_some_and(|l| {
            l.provisioning_status == kos_cloud::model::load_balancer::ProvisioningStatus::Active
        }) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    Err("load balancer never ACTIVE".into())
}

/// The CCM (`manage-security-groups`) adds a Service's `lb-sg-…` group to every node port: `kos up`
/// afterwards must neither plan a change nor take it off (Neutron replaces a port's whole list), or
/// every Service load balancer loses its NodePorts. A group of kos's taken off by hand comes back.
#[tokio::test]
async fn groups_the_ccm_adds_to_node_ports_are_left_alone() -> R {
    use kos_cloud::model::network::{PortUpdate, SecurityGroupCreate};
    let c = start().await?;
    let g = graph(&c.session, &Shape::small("fsg", 1)).await?;
    up(&c.session, &g).await?;
    let net = c.session.network();
    let lb_sg = net
        .create_security_group(&SecurityGroupCreate {
            name: "lb-sg-0a1b-default-web".into(),
            ..SecurityGroupCreate::default()
        })
        .await?;
    let o = observe(&c.session, "fsg").await?;
    let port = o.get("port-workers-0")[0].clone();
    let mut with_ccm = port.facts.security_groups.clone();
    with_ccm.push(lb_sg.id.clone());
    net.update_port(
        &port.id,
        &PortUpdate {
            security_groups: Some(with_ccm.clone()),
            ..PortUpdate::default()
        },
    )
    .await?;
    let p = plan_for(&c.session, &g).await?;
    assert_eq!(p.summary().changes(), 0, "{}", p.diff(false));

    // Someone takes kos's own group off the port: kos puts it back, and keeps the CCM's.
    net.update_port(
        &port.id,
        &PortUpdate {
            security_groups: Some(vec![lb_sg.id.clone()]),
            ..PortUpdate::default()
        },
    )
    .await?;
    let p = plan_for(&c.session, &g).await?;
    let a = p
        .actions
        .iter()
        .find(|a| a.logical_id == "port-workers-0")
        .ok_or("no action for the port")?;
    assert_eq!(a.op, Op::Update, "{}", p.diff(false));
    up(&c.session, &g).await?;
    let o = observe(&c.session, "fsg").await?;
    let mut now = o.get("port-workers-0")[0].facts.security_groups.clone();
    now.sort();
    with_ccm.sort();
    assert_eq!(now, with_ccm);
    assert_eq!(pending(&c.session, &g).await?, 0);
    net.update_port(
        &port.id,
        &PortUpdate {
            security_groups: Some(port.facts.security_groups.clone()),
            ..PortUpdate::default()
        },
    )
    .await?;
    net.delete_security_group(&lb_sg.id).await?;
    down(&c.session, "fsg").await
}

/// The graph of a spec given as YAML (a changed spec of a running cluster).
async fn graph_of(
    s: &kos_cloud::Session,
    yaml: &str,
) -> Result<kos_cluster::graph::DesiredGraph, E> {
    let spec = kos_cluster::load("cluster.yaml", yaml)
        .map(|l| l.spec)
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
    let resolved = resolve(s, &spec).await?;
    Ok(kos_cluster::graph::desired(
        &spec,
        &resolved,
        kos_cluster::bootstrap::Formation::Formed,
    )?)
}

/// A plan that sees every change (before, each of these planned as "0 changes"): a flavor and a boot
/// volume's size are replacements with their reasons, a subnet's DNS servers an update in place that
/// apply makes; the node network's CIDR, the pod and service CIDRs and the CNI are refused.
#[tokio::test]
async fn every_change_to_a_running_cluster_is_planned_with_its_reason() -> R {
    let c = start().await?;
    let shape = Shape {
        name: "chg",
        control_planes: 1,
        load_balancer: false,
        boot_volume: true,
        pools: vec![("workers", 2, "soft-anti-affinity")],
    };
    let g = graph(&c.session, &shape).await?;
    up(&c.session, &g).await?;
    let same = graph_of(&c.session, &shape.yaml()).await?;
    let p = plan_for(&c.session, &same).await?;
    assert_eq!(p.summary().changes(), 0, "{}", p.diff(false));

    let yaml = shape.yaml();
    let (head, pools) = yaml.split_once("  nodePools:").ok_or("pools")?;
    let changed = format!(
        "{}  nodePools:{}",
        head.replace("flavor: m1.small", "flavor: m1.medium")
            .replace(
                "cidr: 10.0.0.0/22",
                "cidr: 10.0.0.0/22\n      dnsServers: [9.9.9.9]"
            ),
        pools.replace("sizeGB: 20", "sizeGB: 30")
    );
    let g2 = graph_of(&c.session, &changed).await?;
    let p = plan_for(&c.session, &g2).await?;
    let op = |id: &str| p.for_node(id).map(|a| a.op);
    assert_eq!(op("cp-0"), Some(Op::Roll), "{}", p.diff(false));
    assert_eq!(op("workers-0"), Some(Op::Roll), "{}", p.diff(false));
    assert_eq!(op("vol-workers-1"), Some(Op::Roll), "{}", p.diff(false));
    // cp-0's volume is unchanged, but a replaced server boots a fresh one.
    assert_eq!(op("vol-cp-0"), Some(Op::Roll), "{}", p.diff(false));
    assert_eq!(op("subnet"), Some(Op::Update), "{}", p.diff(false));
    let diff = p.diff(false);
    assert!(diff.contains("flavor: m1.small → m1.medium"), "{diff}");
    assert!(diff.contains("boot volume size: 20 GB → 30 GB"), "{diff}");
    assert!(diff.contains("DNS servers [] → [\"9.9.9.9\"]"), "{diff}");
    assert!(p.refused.is_empty(), "{:?}", p.refused);

    // The engine makes the update and leaves the replacements to the lifecycle.
    apply_plan(&c.session, &g2, &kos_lifecycle_free_rolls(&p)).await??;
    let p = plan_for(&c.session, &g2).await?;
    assert_eq!(p.for_node("subnet").map(|a| a.op), Some(Op::NoOp));
    assert_eq!(p.for_node("workers-1").map(|a| a.op), Some(Op::Roll));

    let moved = shape
        .yaml()
        .replace("cidr: 10.0.0.0/22", "cidr: 10.8.0.0/22");
    let g3 = graph_of(&c.session, &moved).await?;
    let p = plan_for(&c.session, &g3).await?;
    assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
    assert!(p.refused[0].contains("10.0.0.0/22"), "{:?}", p.refused);

    // The pod and service CIDRs and the CNI, recorded in the control plane's tags: refused, each
    // once (before, they planned as 0 changes and reached only the nodes made next).
    let rebuilt = shape
        .yaml()
        .replace(
            "    ssh:\n",
            "    podCIDR: 10.200.0.0/16\n    serviceCIDR: 10.100.0.0/16\n    ssh:\n",
        )
        .replace(
            "  nodePools:",
            "  addons:\n    cni: flannel\n    csi: none\n  nodePools:",
        )
        .replace(
            "    type: floatingIP\n",
            "    type: floatingIP\n    dnsName: api.chg.example.com\n",
        )
        .replace(
            "serverGroupPolicy: soft-anti-affinity",
            "serverGroupPolicy: anti-affinity",
        );
    let g4 = graph_of(&c.session, &rebuilt).await?;
    let p = plan_for(&c.session, &g4).await?;
    let fields: std::collections::BTreeSet<&str> = p
        .refused
        .iter()
        .filter_map(|r| r.split_once(':').map(|(f, _)| f))
        .collect();
    assert_eq!(
        fields,
        [
            "network.podCIDR",
            "network.serviceCIDR",
            "addons.cni",
            "addons.csi",
        ]
        .into(),
        "{:?}",
        p.refused
    );
    let said = |field: &str, what: &str| {
        p.refused
            .iter()
            .any(|r| r.starts_with(field) && r.contains(what))
    };
    assert!(
        said("network.podCIDR", "made with 10.244.0.0/16"),
        "{:?}",
        p.refused
    );
    assert!(said("addons.cni", "made with calico;"), "{:?}", p.refused);
    // A new DNS name for the API is not refused: the control planes are replaced, their successors
    // taking it into their certificates from kubeadm-config (before, it was refused as well).
    let cp = p.for_node("cp-0").ok_or("cp-0")?;
    assert_eq!(cp.op, Op::Roll, "{}", p.diff(false));
    assert!(
        cp.changes
            .iter()
            .any(|c| c == "apiEndpoint.dnsName: none → api.chg.example.com (a name in its API server's certificate)"),
        "{}",
        p.diff(false)
    );
    // Nor is a server group's new policy (before, refused): Nova cannot change it, so the group is
    // made again and its servers are replaced into it.
    assert_eq!(
        p.for_node("sgroup-workers").map(|a| a.op),
        Some(Op::Replace),
        "{}",
        p.diff(false)
    );
    let w = p.for_node("workers-0").ok_or("workers-0")?;
    assert_eq!(w.op, Op::Roll, "{}", p.diff(false));
    assert!(
        w.changes.iter().any(|c| c.starts_with(
            "server group policy: soft-anti-affinity → anti-affinity (a server joins a group only when it is made)"
        )),
        "{}",
        p.diff(false)
    );

    // A CNI manifest of the user's, on a cluster made with the pinned one: refused as well (kos
    // applies it once, at init), naming its checksum.
    let manifest = shape.yaml().replace(
        "  nodePools:",
        &format!(
            "  addons:\n    cniManifest:\n      url: https://example.com/calico.yaml\n      sha256: {}\n  nodePools:",
            "ab".repeat(32)
        ),
    );
    let g5 = graph_of(&c.session, &manifest).await?;
    let p = plan_for(&c.session, &g5).await?;
    assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
    assert!(
        p.refused[0].starts_with("addons.cni: the running cluster was made with calico; it cannot become calico+abababababababab"),
        "{:?}",
        p.refused
    );

    // kos-csi in place of cinder-csi: the same driver name, but another addon under running
    // workloads, refused as the others; the image is not part of the record.
    let kos_csi = shape.yaml().replace(
        "  nodePools:",
        "  addons:\n    csi: {kos: {image: registry.example.com/kos/kos-csi:0.1.0}}\n  nodePools:",
    );
    let g6 = graph_of(&c.session, &kos_csi).await?;
    let p = plan_for(&c.session, &g6).await?;
    assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
    assert!(
        p.refused[0].starts_with(
            "addons.csi: the running cluster was made with cinder; it cannot become kos under it"
        ),
        "{:?}",
        p.refused
    );
    Ok(())
}

/// A server group's new policy: the engine makes the group again (Nova cannot change a policy), and
/// every server made in the old one stays planned for replacement until it is made in the new one,
/// whether the plan is read before the group was replaced or after (a run killed in between).
#[tokio::test]
async fn a_server_groups_new_policy_makes_it_again_and_replaces_its_servers() -> R {
    let c = start().await?;
    let shape = Shape {
        name: "grp",
        control_planes: 1,
        load_balancer: false,
        boot_volume: false,
        pools: vec![("workers", 2, "soft-anti-affinity")],
    };
    let g = graph(&c.session, &shape).await?;
    up(&c.session, &g).await?;
    let hard = shape.yaml().replace(
        "serverGroupPolicy: soft-anti-affinity",
        "serverGroupPolicy: anti-affinity",
    );
    let g2 = graph_of(&c.session, &hard).await?;
    let p = plan_for(&c.session, &g2).await?;
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    let group = p.for_node("sgroup-workers").ok_or("sgroup-workers")?;
    assert_eq!(group.op, Op::Replace, "{}", p.diff(false));
    assert_eq!(
        group.changes,
        ["policy: soft-anti-affinity → anti-affinity"],
        "{}",
        p.diff(false)
    );
    let old_group = group.existing.as_ref().ok_or("observed")?.id.clone();
    for w in ["workers-0", "workers-1"] {
        assert_eq!(
            p.for_node(w).map(|a| a.op),
            Some(Op::Roll),
            "{}",
            p.diff(false)
        );
    }
    assert_eq!(p.for_node("cp-0").map(|a| a.op), Some(Op::NoOp));

    // The converge (replacements left to the lifecycle) makes the group again.
    apply_plan(&c.session, &g2, &kos_lifecycle_free_rolls(&p)).await??;
    let groups = c.session.compute().list_server_groups().await?;
    let made = groups
        .iter()
        .find(|x| x.name == "kos-grp-sgroup-workers")
        .ok_or("the group")?;
    assert_ne!(made.id, old_group, "made again");
    assert_eq!(made.policy.as_str(), "anti-affinity");
    assert!(
        !groups.iter().any(|x| x.id == old_group),
        "the old group is gone"
    );
    let p = plan_for(&c.session, &g2).await?;
    assert_eq!(p.for_node("sgroup-workers").map(|a| a.op), Some(Op::NoOp));
    let w = p.for_node("workers-1").ok_or("workers-1")?;
    assert_eq!(w.op, Op::Roll, "{}", p.diff(false));
    assert!(
        w.changes.iter().any(|c| c
            .starts_with("server group: not in kos-grp-sgroup-workers of policy anti-affinity")),
        "{}",
        p.diff(false)
    );
    Ok(())
}

/// What `kos up` hands the engine: replacements kept as they are.
fn kos_lifecycle_free_rolls(p: &kos_cluster::plan::Plan) -> kos_cluster::plan::Plan {
    let mut p = p.clone();
    for a in &mut p.actions {
        if a.op == Op::Roll {
            a.op = Op::NoOp;
        }
    }
    p
}

/// A control plane whose kubeadm certificates (a year from when it was made) have less than 30 days
/// left plans as a replacement saying when they expire; workers, whose kubelets rotate their own
/// certificates, do not.
#[tokio::test]
async fn control_planes_near_their_certificates_end_are_replaced() -> R {
    let c = start().await?;
    let shape = Shape::small("certs", 1);
    let g = graph(&c.session, &shape).await?;
    up(&c.session, &g).await?;
    let mut o = observe(&c.session, "certs").await?;
    assert_eq!(plan(&g, &o).summary().changes(), 0);
    let now = o.at_unix.ok_or("observed without a time")?;
    o.at_unix = Some(now + 340 * 24 * 3600);
    let p = plan(&g, &o);
    let cp = p.for_node("cp-0").ok_or("cp-0")?;
    assert_eq!(cp.op, Op::Roll, "{}", p.diff(false));
    assert!(
        cp.changes
            .iter()
            .any(|c| c.contains("kubeadm certificates expire on")),
        "{}",
        p.diff(false)
    );
    assert_eq!(p.for_node("workers-0").map(|a| a.op), Some(Op::NoOp));
    Ok(())
}

/// `teardown_recording` hands the caller what it found after its one listing and before its first
/// delete; when the caller cannot record it, nothing is deleted.
#[tokio::test]
async fn a_teardown_reports_what_it_found_before_deleting_and_stops_when_that_fails() -> R {
    use kos_cluster::teardown::{TeardownError, TeardownOptions, teardown_recording};
    let c = start().await?;
    let s = &c.session;
    let g = graph(s, &Shape::small("found", 1)).await?;
    up(s, &g).await?;
    let made = leftovers(s, "found").await?;
    assert!(!made.is_empty());

    let refused = teardown_recording(s, "found", &TeardownOptions::fast(), |_| {
        Err(std::io::Error::other("disk full"))
    })
    .await;
    assert!(
        matches!(&refused, Err(TeardownError::Found(e)) if e.to_string() == "disk full"),
        "{refused:?}"
    );
    assert_eq!(leftovers(s, "found").await?, made, "nothing deleted");

    let mut seen = Vec::new();
    let report = teardown_recording(s, "found", &TeardownOptions::fast(), |found| {
        seen = found.iter().map(|r| r.id.clone()).collect();
        Ok::<_, std::io::Error>(())
    })
    .await?;
    let deleted: Vec<String> = report.resources.iter().map(|r| r.id.clone()).collect();
    assert_eq!(seen, deleted, "what it found is what it deleted");
    assert!(leftovers(s, "found").await?.is_empty());
    Ok(())
}

/// A worker's server deleted behind kos's back leaves its boot volume, the old node's disk
/// (kubeadm's files, a kubelet's state). Made again, the server boots a new volume: on the old one
/// kubeadm's preflight would refuse to join.
#[tokio::test]
async fn a_server_gone_while_its_boot_volume_stayed_boots_a_new_volume() -> R {
    let c = start().await?;
    let shape = Shape {
        name: "bv",
        control_planes: 1,
        load_balancer: false,
        boot_volume: true,
        pools: vec![("workers", 1, "soft-anti-affinity")],
    };
    let g = graph(&c.session, &shape).await?;
    up(&c.session, &g).await?;
    let before = observe(&c.session, "bv").await?;
    let old_volume = before.get("vol-workers-0")[0].id.clone();
    let server = before.get("workers-0")[0].id.clone();
    c.session.compute().delete_server(&server).await?;
    for _ in 0..3000 {
        if c.session.compute().get_server(&server).await?.is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let p = plan_for(&c.session, &g).await?;
    let op = |id: &str| p.for_node(id).map(|a| a.op);
    assert_eq!(op("workers-0"), Some(Op::Create), "{}", p.diff(false));
    assert_eq!(op("vol-workers-0"), Some(Op::Replace), "{}", p.diff(false));
    // The control plane's volume, whose server runs, is kept.
    assert_eq!(op("vol-cp-0"), Some(Op::NoOp), "{}", p.diff(false));
    up(&c.session, &g).await?;
    assert_eq!(pending(&c.session, &g).await?, 0);
    let after = observe(&c.session, "bv").await?;
    let new_volume = &after.get("vol-workers-0")[0].id;
    assert_ne!(
        new_volume, &old_volume,
        "the old node's disk was booted again"
    );
    assert!(
        c.session
            .block_storage()
            .get_volume(&old_volume)
            .await?
            .is_none(),
        "the old volume is left"
    );
    down(&c.session, "bv").await
}
