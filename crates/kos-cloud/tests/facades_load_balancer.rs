//! The Octavia facade against kos-sim: create → wait ACTIVE → listener, pool, monitor, members (batch
//! replace) with a wait between each → status tree → update → cascade delete; fully-populated create;
//! providers and flavors.

mod facades_support;

use facades_support::{R, cluster, deadline, network_with_subnet, start, tags};
use kos_cloud::load_balancer::POOL_PAGE_MEMBER_REFS;
use kos_cloud::model::load_balancer::{
    HealthMonitorCreate, LbAlgorithm, ListenerCreate, ListenerTimeouts, ListenerUpdate,
    LoadBalancerCreate, LoadBalancerFilter, LoadBalancerUpdate, MemberIds, MemberSpec, MonitorType,
    OperatingStatus, PoolCreate, PoolParent, Protocol, ProvisioningStatus, Vip,
};
use kos_cloud::{ApiErrorKind, ServiceKind};
use kos_sim::FaultRule;

#[tokio::test]
async fn load_balancer_lifecycle_with_children_and_cascade_delete() -> R {
    let c = start().await?;
    let lbs = c.session.load_balancer();
    let sub = network_with_subnet(&c.session, "10.40.0.0/24").await?;

    let mut req = LoadBalancerCreate::new("kos-t1-api", Vip::Subnet(sub.id.clone()));
    req.tags = tags("lb-api");
    req.description = Some("kos API endpoint".into());
    let lb = lbs.create_load_balancer(&req).await?;
    assert!(
        lb.provisioning_status.is_pending(),
        "{}",
        lb.provisioning_status
    );
    assert!(lb.tags.contains(&"kos-id=lb-api".to_owned()));
    // The LB is immutable until ACTIVE.
    let early = lbs
        .create_listener(&ListenerCreate::new(&lb.id, "early", Protocol::Tcp, 6443))
        .await;
    if let Err(e) = &early {
        assert_eq!(e.kind(), Some(ApiErrorKind::Conflict), "{e}");
    }
    let lb = lbs.wait_for_active(&lb.id, deadline()).await?;
    assert_eq!(lb.provisioning_status, ProvisioningStatus::Active);
    let vip = lb.vip_address.clone().ok_or("no VIP address")?;
    assert!(vip.starts_with("10.40.0."), "{vip}");
    let listed = lbs
        .list_load_balancers(&LoadBalancerFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?;
    assert_eq!(
        listed.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        vec![lb.id.as_str()]
    );
    let by_name = lbs
        .list_load_balancers(&LoadBalancerFilter {
            name: Some("kos-t1-api".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(by_name.len(), 1);

    let listener = match early {
        Ok(l) => l,
        Err(_) => {
            let mut l = ListenerCreate::new(&lb.id, "kos-t1-api-6443", Protocol::Tcp, 6443);
            l.allowed_cidrs = vec!["0.0.0.0/0".into()];
            l.timeouts = ListenerTimeouts {
                timeout_client_data: Some(600_000),
                timeout_member_data: Some(600_000),
                ..Default::default()
            };
            lbs.create_listener(&l).await?
        }
    };
    lbs.wait_for_active(&lb.id, deadline()).await?;
    let listener = lbs
        .update_listener(
            &listener.id,
            &ListenerUpdate {
                allowed_cidrs: Some(vec!["192.0.2.0/24".into()]),
                ..Default::default()
            },
        )
        .await?;
    assert_eq!(listener.allowed_cidrs, vec!["192.0.2.0/24".to_owned()]);
    lbs.wait_for_active(&lb.id, deadline()).await?;
    assert_eq!(lbs.list_listeners(&lb.id).await?.len(), 1);

    let pool = lbs
        .create_pool(&PoolCreate::new(
            PoolParent::Listener(listener.id.clone()),
            "kos-t1-api",
            Protocol::Tcp,
            LbAlgorithm::RoundRobin,
        ))
        .await?;
    lbs.wait_for_active(&lb.id, deadline()).await?;
    let hm = lbs
        .create_health_monitor(&HealthMonitorCreate::new(
            &pool.id,
            MonitorType::Tcp,
            5,
            3,
            3,
        ))
        .await?;
    lbs.wait_for_active(&lb.id, deadline()).await?;
    assert!(lbs.get_health_monitor(&hm.id).await?.is_some());

    let members = vec![
        MemberSpec {
            subnet_id: Some(sub.id.clone()),
            ..MemberSpec::new("10.40.0.11", 6443)
        },
        MemberSpec::new("10.40.0.12", 6443),
    ];
    lbs.replace_members(&pool.id, &members).await?;
    lbs.wait_for_active(&lb.id, deadline()).await?;
    let got = lbs.list_members(&pool.id).await?;
    let mut addrs: Vec<_> = got.iter().map(|m| m.address.as_str()).collect();
    addrs.sort_unstable();
    assert_eq!(addrs, vec!["10.40.0.11", "10.40.0.12"]);
    // Replacing again with one member removes the other.
    lbs.replace_members(&pool.id, &members[..1]).await?;
    lbs.wait_for_active(&lb.id, deadline()).await?;
    assert_eq!(lbs.list_members(&pool.id).await?.len(), 1);

    let tree = lbs.status_tree(&lb.id).await?;
    assert_eq!(tree.id, lb.id);
    assert_eq!(tree.listeners.len(), 1);
    assert_eq!(tree.listeners[0].pools[0].members.len(), 1);
    assert_ne!(tree.operating_status, OperatingStatus::default());

    let updated = lbs
        .update_load_balancer(
            &lb.id,
            &LoadBalancerUpdate {
                description: Some("updated".into()),
                ..Default::default()
            },
        )
        .await?;
    assert_eq!(updated.description, "updated");
    lbs.wait_for_active(&lb.id, deadline()).await?;

    lbs.delete_load_balancer(&lb.id, true).await?;
    lbs.wait_for_deleted(&lb.id, deadline()).await?;
    assert!(lbs.get_load_balancer(&lb.id).await?.is_none());
    assert!(lbs.get_pool(&pool.id).await?.is_none());
    assert!(lbs.get_listener(&listener.id).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn a_fully_populated_load_balancer_comes_up_in_one_create() -> R {
    let c = start().await?;
    let lbs = c.session.load_balancer();
    let sub = network_with_subnet(&c.session, "10.41.0.0/24").await?;
    let mut pool = PoolCreate::new(
        PoolParent::Inline,
        "kos-t1-api",
        Protocol::Tcp,
        LbAlgorithm::RoundRobin,
    );
    pool.healthmonitor = Some(HealthMonitorCreate::new("", MonitorType::Tcp, 5, 3, 3));
    pool.members = vec![MemberSpec::new("10.41.0.11", 6443)];
    let mut listener = ListenerCreate::new("", "kos-t1-api-6443", Protocol::Tcp, 6443);
    listener.default_pool = Some(pool);
    let mut req = LoadBalancerCreate::new("kos-t1-full", Vip::Network(sub.network_id.clone()));
    req.listeners = vec![listener];
    req.tags = tags("lb-full");
    let lb = lbs.create_load_balancer(&req).await?;
    let lb = lbs.wait_for_active(&lb.id, deadline()).await?;
    let tree = lbs.status_tree(&lb.id).await?;
    assert_eq!(tree.listeners.len(), 1);
    let p = tree.listeners[0]
        .pools
        .first()
        .ok_or("no pool in the tree")?;
    assert_eq!(p.members.len(), 1);
    assert!(p.healthmonitor.as_ref().is_some_and(|h| !h.id.is_empty()));
    lbs.delete_load_balancer(&lb.id, true).await?;
    lbs.wait_for_deleted(&lb.id, deadline()).await?;
    Ok(())
}

/// The project's pools with their member ids folded while read: the same pools as the plain
/// list, each fold that of the ids the plain list shows, paged like every list.
#[tokio::test]
async fn project_pools_listed_folded_match_the_plain_list_page_by_page() -> R {
    let c = start().await?;
    let lbs = c.session.load_balancer();
    let sub = network_with_subnet(&c.session, "10.42.0.0/24").await?;
    for (i, n) in [0_u8, 2, 3].into_iter().enumerate() {
        let mut pool = PoolCreate::new(
            PoolParent::Inline,
            format!("p{i}"),
            Protocol::Tcp,
            LbAlgorithm::RoundRobin,
        );
        pool.members = (0..n)
            .map(|m| MemberSpec::new(format!("10.42.0.{}", 10 + m), 30080))
            .collect();
        let mut listener = ListenerCreate::new("", format!("l{i}"), Protocol::Tcp, 80);
        listener.default_pool = Some(pool);
        let mut req = LoadBalancerCreate::new(format!("lb{i}"), Vip::Subnet(sub.id.clone()));
        req.listeners = vec![listener];
        let lb = lbs.create_load_balancer(&req).await?;
        lbs.wait_for_active(&lb.id, deadline()).await?;
    }
    let plain = lbs.list_project_pools().await?;
    let calls = || {
        c.session
            .counters()
            .operation(ServiceKind::LoadBalancer, "pool.list")
    };
    let before = calls();
    let folded = lbs.page_size(2).list_project_pools_folded(0).await?;
    assert_eq!(calls() - before, 2, "3 pools in pages of 2");
    assert_eq!(plain.len(), 3);
    assert_eq!(folded.len(), plain.len());
    for f in &folded {
        let p = plain
            .iter()
            .find(|p| p.id == f.pool.id)
            .ok_or("a pool the plain list lacks")?;
        assert!(f.pool.members.is_empty(), "no member id is kept");
        assert_eq!(
            f.member_ids,
            MemberIds::of(p.members.iter().map(|m| m.id.as_str()))
        );
        assert_eq!(
            (f.pool.name.as_str(), f.pool.protocol.clone()),
            (p.name.as_str(), p.protocol.clone())
        );
    }
    let mut counts: Vec<usize> = folded.iter().map(|f| f.member_ids.count()).collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![0, 2, 3]);

    // Sized by members: small pools fit one page; pools as large as a page's worth of member
    // references come one a page (a full page asks once more, as Octavia links it).
    let ids = |f: &[kos_cloud::model::load_balancer::PoolMembersFolded]| {
        let mut v: Vec<(String, MemberIds)> = f
            .iter()
            .map(|f| (f.pool.id.clone(), f.member_ids))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let before = calls();
    let one = lbs.list_project_pools_folded(0).await?;
    assert_eq!(calls() - before, 1);
    assert_eq!(ids(&one), ids(&folded));
    let before = calls();
    let large = POOL_PAGE_MEMBER_REFS;
    let paged = lbs.list_project_pools_folded(large).await?;
    assert_eq!(calls() - before, 4, "one pool a page");
    assert_eq!(ids(&paged), ids(&folded));

    // The marker's pool deleted between two pages (Octavia: 400): the listing starts again.
    c.sim.app().fault_engine().add(FaultRule {
        id: None,
        method: Some("GET".into()),
        path: "/lbaas/pools$".into(),
        body: None,
        status: 400,
        probability: 1.0,
        count: Some(1),
        skip: 1,
        retry_after: None,
        after_side_effect: false,
        build_error: false,
        message: Some("Supplied pagination marker is not valid.".into()),
    })?;
    let before = calls();
    let again = lbs.list_project_pools_folded(large).await?;
    assert_eq!(
        calls() - before,
        6,
        "a page, the refused one, then all four"
    );
    assert_eq!(ids(&again), ids(&folded));
    Ok(())
}

#[tokio::test]
async fn providers_and_flavors_are_listed() -> R {
    let c = start().await?;
    let providers = c.session.load_balancer().list_providers().await?;
    assert!(!providers.is_empty());
    let _flavors = c.session.load_balancer().list_flavors().await?;
    let err = c
        .session
        .load_balancer()
        .create_pool(&PoolCreate::new(
            PoolParent::Inline,
            "p",
            Protocol::Tcp,
            LbAlgorithm::RoundRobin,
        ))
        .await;
    assert!(err.is_err(), "a pool without a parent must be refused");
    Ok(())
}
