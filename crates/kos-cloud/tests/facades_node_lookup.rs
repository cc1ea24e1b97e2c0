//! What the CCM's node controller asks Nova: servers by exact name (Nova filters by regular
//! expression), a flavor by id, a server's access IPs and availability zone.

mod facades_support;

use facades_support::{R, deadline, network_with_subnet, start};
use kos_cloud::model::compute::{Boot, Nic, ServerCreate};
use kos_cloud::model::image::ImageFilter;

#[tokio::test]
async fn servers_are_listed_by_exact_name_and_flavors_got_by_id() -> R {
    let c = start().await?;
    let nova = c.session.compute();
    let subnet = network_with_subnet(&c.session, "10.0.0.0/24").await?;
    let mut flavors = nova.list_flavors().await?;
    flavors.sort_by_key(|f| (f.ram, f.vcpus));
    let flavor = flavors.first().ok_or("no flavor")?.clone();
    let image = c
        .session
        .image()
        .list_images(&ImageFilter::default())
        .await?
        .into_iter()
        .next()
        .ok_or("no image")?;
    // `.` is a regex metacharacter: the lookup of `kos-a.w-0` must not find `kos-aXw-0` or
    // `kos-a.w-00`.
    let mut ids = Vec::new();
    for name in ["kos-a.w-0", "kos-aXw-0", "kos-a.w-00"] {
        let mut req = ServerCreate::new(name, &flavor.id, Boot::Image(image.id.clone()));
        req.nics = vec![Nic::Network {
            id: subnet.network_id.clone(),
            fixed_ip: None,
        }];
        ids.push(nova.create_server(&req).await?.id);
    }
    let found = nova.list_servers_named("kos-a.w-0").await?;
    assert_eq!(
        found.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [ids[0].as_str()]
    );
    assert!(nova.list_servers_named("kos-nope").await?.is_empty());

    let s = nova.wait_for_server_active(&ids[0], deadline()).await?;
    assert_eq!(s.access_ipv4, "");
    assert!(
        s.availability_zone
            .as_deref()
            .is_some_and(|z| !z.is_empty())
    );
    assert_eq!(
        s.flavor.original_name.as_deref(),
        Some(flavor.name.as_str())
    );

    assert_eq!(
        nova.get_flavor(&flavor.id).await?.map(|f| f.name),
        Some(flavor.name.clone())
    );
    assert!(nova.get_flavor("no-such-flavor").await?.is_none());
    Ok(())
}
