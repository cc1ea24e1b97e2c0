//! The Nova facade against kos-sim: flavors, keypairs, server groups, a server on a pre-made port (wait
//! ACTIVE, list by tag, console, stop/start, volume attach), the fault of an ERROR server, the user_data
//! limit, limits.

mod facades_support;

use facades_support::{R, cluster, deadline, network_with_subnet, start, start_with, tags};
use kos_cloud::model::block_storage::VolumeCreate;
use kos_cloud::model::compute::{
    Boot, Flavor, KeypairCreate, Nic, ServerCreate, ServerGroupCreate, ServerGroupPolicy,
    ServerStatus, VolumeAttach,
};
use kos_cloud::model::image::ImageFilter;
use kos_cloud::model::network::PortCreate;
use kos_cloud::{CloudError, ServiceKind, Session};
use kos_sim::SimConfig;

/// A syntactically valid ed25519 public key (Nova computes its fingerprint).
const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f kos@test";

async fn smallest_flavor(s: &Session) -> Result<Flavor, CloudError> {
    let mut f = s.compute().list_flavors().await?;
    f.sort_by_key(|f| (f.ram, f.vcpus));
    f.into_iter().next().ok_or(CloudError::Lookup {
        what: "flavor".into(),
        detail: "the cloud has none".into(),
    })
}

async fn any_image(s: &Session) -> Result<String, CloudError> {
    let i = s.image().list_images(&ImageFilter::default()).await?;
    i.into_iter()
        .next()
        .map(|i| i.id)
        .ok_or(CloudError::Lookup {
            what: "image".into(),
            detail: "the cloud has none".into(),
        })
}

#[tokio::test]
async fn flavors_are_found_by_name_or_id_exactly_once() -> R {
    let c = start().await?;
    let f = smallest_flavor(&c.session).await?;
    assert_eq!(c.session.compute().find_flavor(&f.name).await?.id, f.id);
    assert_eq!(c.session.compute().find_flavor(&f.id).await?.name, f.name);
    let err = c
        .session
        .compute()
        .find_flavor("no-such-flavor")
        .await
        .err()
        .ok_or("found a flavor that does not exist")?;
    assert!(matches!(err, CloudError::Lookup { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn keypairs_and_server_groups_lifecycle() -> R {
    let c = start().await?;
    let nova = c.session.compute();
    let k = nova
        .create_keypair(&KeypairCreate::ssh("kos-t1", PUBLIC_KEY))
        .await?;
    assert_eq!(k.name, "kos-t1");
    assert_eq!(
        nova.get_keypair("kos-t1").await?.map(|k| k.public_key),
        Some(PUBLIC_KEY.to_owned())
    );
    assert!(
        nova.list_keypairs()
            .await?
            .iter()
            .any(|k| k.name == "kos-t1")
    );
    nova.delete_keypair("kos-t1").await?;
    nova.delete_keypair("kos-t1").await?;
    assert!(nova.get_keypair("kos-t1").await?.is_none());

    let g = nova
        .create_server_group(&ServerGroupCreate::new(
            "kos-t1-cp",
            ServerGroupPolicy::AntiAffinity,
        ))
        .await?;
    assert_eq!(g.policy, ServerGroupPolicy::AntiAffinity);
    assert_eq!(
        nova.get_server_group(&g.id).await?.map(|g| g.name),
        Some("kos-t1-cp".to_owned())
    );
    assert!(
        nova.list_server_groups()
            .await?
            .iter()
            .any(|x| x.id == g.id)
    );
    nova.delete_server_group(&g.id).await?;
    assert!(nova.get_server_group(&g.id).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn server_on_a_premade_port_boots_and_is_listed_by_tag() -> R {
    let c = start().await?;
    let nova = c.session.compute();
    let sub = network_with_subnet(&c.session, "10.30.0.0/24").await?;
    let port = c
        .session
        .network()
        .create_port(&PortCreate {
            tags: tags("port-cp0"),
            ..PortCreate::new(&sub.network_id, "kos-t1-cp0")
        })
        .await?;
    let flavor = smallest_flavor(&c.session).await?;
    let image = any_image(&c.session).await?;
    nova.create_keypair(&KeypairCreate::ssh("kos-t1", PUBLIC_KEY))
        .await?;
    let group = nova
        .create_server_group(&ServerGroupCreate::new(
            "kos-t1-cp",
            ServerGroupPolicy::SoftAntiAffinity,
        ))
        .await?;

    let mut req = ServerCreate::new("kos-t1-cp0", &flavor.id, Boot::Image(image.clone()));
    req.nics = vec![Nic::Port(port.id.clone())];
    req.user_data = Some(b"#cloud-config\nruncmd: [echo hi]\n".to_vec());
    req.tags = tags("cp0");
    req.metadata.insert("kos-cluster".into(), "t1".into());
    req.key_name = Some("kos-t1".into());
    req.server_group = Some(group.id.clone());
    req.description = Some("control plane 0".into());
    let created = nova.create_server(&req).await?;

    let s = nova.wait_for_server_active(&created.id, deadline()).await?;
    assert_eq!(s.status, ServerStatus::Active);
    assert!(s.fault.is_none());
    assert_eq!(s.image_id.as_deref(), Some(image.as_str()));
    assert_eq!(s.key_name.as_deref(), Some("kos-t1"));
    assert!(s.tags.contains(&"kos-id=cp0".to_owned()), "{:?}", s.tags);
    assert_eq!(
        s.metadata.get("kos-cluster").map(String::as_str),
        Some("t1")
    );
    let ip = &port.fixed_ips[0].ip_address;
    assert!(
        s.fixed_ips().any(|a| a == ip),
        "server addresses {:?} lack the port's {ip}",
        s.addresses
    );
    let bound = c
        .session
        .network()
        .get_port(&port.id)
        .await?
        .ok_or("port vanished")?;
    assert_eq!(bound.device_id, s.id);

    let listed = nova.list_servers(&cluster()).await?;
    assert_eq!(
        listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        vec![s.id.as_str()]
    );
    assert!(
        nova.get_server_group(&group.id)
            .await?
            .is_some_and(|g| g.members.contains(&s.id))
    );

    let _console: String = nova.console_output(&s.id, Some(10)).await?;
    nova.stop_server(&s.id).await?;
    let stopped = facades_support::poll(|| async {
        Ok(nova
            .get_server(&s.id)
            .await?
            .is_some_and(|s| s.status == ServerStatus::Shutoff))
    })
    .await?;
    assert!(stopped, "server never reached SHUTOFF");
    nova.start_server(&s.id).await?;
    nova.wait_for_server_active(&s.id, deadline()).await?;

    nova.delete_server(&s.id).await?;
    let gone =
        facades_support::poll(|| async { Ok(nova.get_server(&s.id).await?.is_none()) }).await?;
    assert!(gone, "server still there after delete");
    assert!(nova.list_servers(&cluster()).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn an_error_server_reports_its_fault() -> R {
    // One host: the second member of an anti-affinity group cannot be placed.
    let c = start_with(SimConfig {
        compute_hosts: 1,
        ..SimConfig::fast()
    })
    .await?;
    let nova = c.session.compute();
    let sub = network_with_subnet(&c.session, "10.31.0.0/24").await?;
    let flavor = smallest_flavor(&c.session).await?;
    let image = any_image(&c.session).await?;
    let group = nova
        .create_server_group(&ServerGroupCreate::new(
            "kos-t1-aa",
            ServerGroupPolicy::AntiAffinity,
        ))
        .await?;
    let mut ids = Vec::new();
    for i in 0..2 {
        let mut req = ServerCreate::new(
            format!("kos-t1-cp{i}"),
            &flavor.id,
            Boot::Image(image.clone()),
        );
        req.nics = vec![Nic::Network {
            id: sub.network_id.clone(),
            fixed_ip: None,
        }];
        req.server_group = Some(group.id.clone());
        ids.push(nova.create_server(&req).await?.id);
    }
    let mut errors = Vec::new();
    for id in &ids {
        if let Err(e) = nova.wait_for_server_active(id, deadline()).await {
            errors.push((id.clone(), e));
        }
    }
    assert_eq!(errors.len(), 1, "exactly one server fails: {errors:?}");
    let (id, err) = &errors[0];
    assert!(
        matches!(err, CloudError::Failed { .. }),
        "a server in ERROR fails the wait: {err:?}"
    );
    let s = nova.get_server(id).await?.ok_or("ERROR server missing")?;
    assert_eq!(s.status, ServerStatus::Error);
    let fault = s.fault.ok_or("no fault on an ERROR server")?;
    assert!(!fault.message.is_empty());
    assert!(
        err.to_string().contains(&fault.message),
        "wait error {err} lacks the fault {}",
        fault.message
    );
    Ok(())
}

#[tokio::test]
async fn oversized_user_data_is_refused_before_sending() -> R {
    let c = start().await?;
    let mut req = ServerCreate::new("big", "1", Boot::Image("img".into()));
    req.user_data = Some(vec![b'#'; 60_000]);
    let before = c
        .session
        .counters()
        .operation(ServiceKind::Compute, "server.create");
    let err = c
        .session
        .compute()
        .create_server(&req)
        .await
        .err()
        .ok_or("oversized user_data was sent")?;
    assert!(matches!(err, CloudError::Invalid { .. }), "{err:?}");
    assert!(err.to_string().contains("65535"), "{err}");
    assert_eq!(
        c.session
            .counters()
            .operation(ServiceKind::Compute, "server.create"),
        before
    );
    Ok(())
}

#[tokio::test]
async fn volumes_attach_and_detach() -> R {
    let c = start().await?;
    let nova = c.session.compute();
    let sub = network_with_subnet(&c.session, "10.32.0.0/24").await?;
    let flavor = smallest_flavor(&c.session).await?;
    let image = any_image(&c.session).await?;
    let mut req = ServerCreate::new("kos-t1-w0", &flavor.id, Boot::Image(image));
    req.nics = vec![Nic::Network {
        id: sub.network_id.clone(),
        fixed_ip: Some("10.32.0.20".into()),
    }];
    let server = nova.create_server(&req).await?;
    nova.wait_for_server_active(&server.id, deadline()).await?;
    let vol = c
        .session
        .block_storage()
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some("kos-t1-data".into()),
            ..Default::default()
        })
        .await?;
    c.session
        .block_storage()
        .wait_for_available(&vol.id, deadline())
        .await?;

    let a = nova
        .attach_volume(
            &server.id,
            &VolumeAttach {
                delete_on_termination: true,
                ..VolumeAttach::new(&vol.id)
            },
        )
        .await?;
    assert_eq!(
        (a.volume_id.as_str(), a.server_id.as_str()),
        (vol.id.as_str(), server.id.as_str())
    );
    let l = nova.list_volume_attachments(&server.id).await?;
    assert_eq!(l.len(), 1);
    // An attach takes time, and Cinder refuses a detach until the volume is in-use (as minicloud's
    // real Cinder does).
    c.session
        .block_storage()
        .wait_for_attachment(&vol.id, &server.id, true, deadline())
        .await?;
    nova.detach_volume(&server.id, &vol.id).await?;
    let detached = facades_support::poll(|| async {
        Ok(nova.list_volume_attachments(&server.id).await?.is_empty())
    })
    .await?;
    assert!(detached);
    Ok(())
}

#[tokio::test]
async fn limits_include_usage() -> R {
    let c = start().await?;
    let l = c.session.compute().limits().await?;
    assert!(l.max_total_instances > 0 && l.max_total_cores > 0, "{l:?}");
    assert_eq!(l.total_instances_used, 0);
    Ok(())
}
