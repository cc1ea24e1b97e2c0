//! What a user (or a crash) does behind kos's back, through the facades: their own network, subnet and
//! router, objects stripped of kos's tags, servers deleted out of band, and a census of every object id.
//! Included with `#[path]` by the tests that need it.
#![allow(dead_code)] // Each test file uses a different part of this.

use std::collections::BTreeSet;
use std::time::Duration;

use kos_cloud::Session;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::model::network::{
    FloatingIpFilter, NetworkCreate, NetworkFilter, PortCreate, PortFilter, RouterCreate,
    RouterFilter, SecurityGroupFilter, SubnetCreate, SubnetFilter, TaggedKind,
};

use super::E;

/// A network, subnet and (optionally) router that the user made: no kos tag, no kos name.
#[derive(Debug, Clone)]
pub struct UserNet {
    pub network: String,
    pub subnet: String,
    /// With its gateway on the external network and an interface on the subnet.
    pub router: Option<String>,
    /// The router interface's port.
    pub interface: Option<String>,
}

pub async fn user_network(s: &Session, name: &str, cidr: &str, router: bool) -> Result<UserNet, E> {
    let n = s.network();
    let net = n
        .create_network(&NetworkCreate {
            name: name.into(),
            ..NetworkCreate::default()
        })
        .await?;
    let sub = n
        .create_subnet(&SubnetCreate::new(&net.id, format!("{name}-subnet"), cidr))
        .await?;
    let (router, interface) = if router {
        let ext = n.external_network(None).await?;
        let r = n
            .create_router(&RouterCreate::with_gateway(
                format!("{name}-router"),
                ext.id,
            ))
            .await?;
        let i = n.add_router_interface(&r.id, &sub.id).await?;
        (Some(r.id), Some(i.port_id))
    } else {
        (None, None)
    };
    Ok(UserNet {
        network: net.id,
        subnet: sub.id,
        router,
        interface,
    })
}

/// An untagged port the user runs something on.
pub async fn user_port(s: &Session, network: &str, name: &str) -> Result<String, E> {
    Ok(s.network()
        .create_port(&PortCreate::new(network, name))
        .await?
        .id)
}

/// What a crash between create and tag leaves: the object without any tag.
pub async fn strip_tags(s: &Session, kind: TaggedKind, id: &str) -> Result<(), E> {
    s.network().set_tags(kind, id, &[]).await?;
    Ok(())
}

/// Deletes the servers tagged for `cluster` and waits until Nova has none left.
pub async fn delete_servers(s: &Session, cluster: &str) -> Result<(), E> {
    let q = TagQuery::all([format!("kos-cluster={cluster}")]);
    for srv in s.compute().list_servers(&q).await? {
        s.compute().delete_server(&srv.id).await?;
    }
    for _ in 0..3000 {
        if s.compute().list_servers(&q).await?.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("servers of {cluster} still there").into())
}

/// The id (the name, for keypairs) of every object in the project.
pub async fn census(s: &Session) -> Result<BTreeSet<String>, E> {
    let (n, c) = (s.network(), s.compute());
    let mut ids = BTreeSet::new();
    ids.extend(
        n.list_networks(&NetworkFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_subnets(&SubnetFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_routers(&RouterFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_ports(&PortFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_security_groups(&SecurityGroupFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_floating_ips(&FloatingIpFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        c.list_servers(&TagQuery::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(c.list_keypairs().await?.into_iter().map(|x| x.name));
    ids.extend(c.list_server_groups().await?.into_iter().map(|x| x.id));
    ids.extend(
        s.block_storage()
            .list_volumes(&VolumeFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        s.load_balancer()
            .list_load_balancers(&LoadBalancerFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        s.identity()
            .list_application_credentials(None)
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    Ok(ids)
}
