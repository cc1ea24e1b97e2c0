//! Everything preflight asks the cloud, asked once and concurrently. The checks read only this.

use std::collections::BTreeMap;

use futures::future::join_all;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::{Volume, VolumeFilter, VolumeQuotas, VolumeType, VolumeZone};
use kos_cloud::model::compute::{AvailabilityZone, ComputeLimits, Flavor, Server, ServerGroup};
use kos_cloud::model::image::{Image, ImageFilter};
use kos_cloud::model::load_balancer::{LbQuotas, LoadBalancer, LoadBalancerFilter, Provider};
use kos_cloud::model::network::{
    FloatingIp, FloatingIpFilter, Network, NetworkFilter, NetworkQuotas, Port, PortFilter, Router,
    RouterFilter, SecurityGroup, SecurityGroupFilter, Subnet, SubnetFilter,
};
use kos_cloud::{CloudError, Session};

use crate::names::{TAG_CLUSTER, cluster_tag};
use crate::observe::Listed;
use crate::spec::{ClusterSpec, Csi, EndpointKind, ImageRef, Machine, ResourceRef};

type Fetched<T> = Result<T, CloudError>;

/// The cloud's answers. Optional fields are `None` when the spec does not need them (no load balancer, no
/// boot volume, no zones), so a cloud without that service is not asked.
pub(crate) struct Facts {
    pub flavors: Fetched<Vec<Flavor>>,
    /// Per distinct image reference of the spec: the images that match it.
    pub images: Vec<(ImageRef, Fetched<Vec<Image>>)>,
    /// Every network the project sees (its own, shared and external ones).
    pub networks: Fetched<Vec<Network>>,
    pub subnets: Fetched<Vec<Subnet>>,
    pub routers: Fetched<Vec<Router>>,
    /// All the project's ports: router interfaces, addresses used on a subnet, this cluster's ports.
    pub ports: Fetched<Vec<Port>>,
    /// Nova's zones, asked when a machine names zones or a CSI driver is installed (its volumes'
    /// zone is decided from the zones the nodes may land in).
    pub zones: Option<Fetched<Vec<AvailabilityZone>>>,
    /// Cinder's own zones, asked whenever a machine boots from a volume or a CSI driver is installed
    /// (they need not be Nova's).
    pub volume_zones: Option<Fetched<Vec<VolumeZone>>>,
    pub providers: Option<Fetched<Vec<Provider>>>,
    pub volume_types: Option<Fetched<Vec<VolumeType>>>,
    pub compute_limits: Fetched<ComputeLimits>,
    pub network_quotas: Fetched<NetworkQuotas>,
    pub volume_quotas: Option<Fetched<VolumeQuotas>>,
    pub lb_quotas: Option<Fetched<LbQuotas>>,
    /// This cluster's servers, volumes, floating IPs and security groups (by its tag).
    pub servers: Fetched<Vec<Server>>,
    pub volumes: Option<Fetched<Vec<Volume>>>,
    pub floating_ips: Fetched<Vec<FloatingIp>>,
    pub security_groups: Fetched<Vec<SecurityGroup>>,
    /// All the project's server groups (they have no tags: kos's are known by name).
    pub server_groups: Fetched<Vec<ServerGroup>>,
    /// All the project's load balancers: their number is the usage Octavia does not report.
    pub load_balancers: Option<Fetched<Vec<LoadBalancer>>>,
    /// The roles of the session's token on the project (no call: from the token).
    pub token_roles: Vec<String>,
}

/// The machines of a spec: control plane first, then the pools in order.
pub(crate) fn machines(spec: &ClusterSpec) -> impl Iterator<Item = &Machine> {
    std::iter::once(&spec.control_plane.machine).chain(spec.node_pools.iter().map(|p| &p.machine))
}

/// Whether the spec installs a CSI driver (cinder-csi or kos-csi), whose volumes Cinder makes.
pub(crate) fn uses_csi(spec: &ClusterSpec) -> bool {
    !matches!(spec.addons.csi, Csi::None)
}

/// What an observe listed already (`Some`), else the list call.
async fn or_list<T, F: Future<Output = Fetched<T>>>(
    known: Option<T>,
    list: impl FnOnce() -> F,
) -> Fetched<T> {
    match known {
        Some(t) => Ok(t),
        None => list().await,
    }
}

/// Runs `f` only when `wanted`, so a service the spec does not use is never called.
async fn when<T, F: Future<Output = T>>(wanted: bool, f: impl FnOnce() -> F) -> Option<T> {
    if wanted { Some(f().await) } else { None }
}

impl Facts {
    /// `listed`: what an observe of this cluster listed just before (those lists are not asked
    /// again); ignored when it is another cluster's.
    pub async fn gather(session: &Session, spec: &ClusterSpec, listed: Option<&Listed>) -> Facts {
        let (compute, network, image, lb, storage) = (
            session.compute(),
            session.network(),
            session.image(),
            session.load_balancer(),
            session.block_storage(),
        );
        let tag = cluster_tag(&spec.name);
        let ours = || TagQuery::all([tag.as_str()]);
        let listed = listed.filter(|l| l.cluster == spec.name.to_string());
        let uses_lb = matches!(
            spec.api_endpoint.kind.value,
            EndpointKind::LoadBalancer { .. }
        ) || spec.service_load_balancers.provider.is_some();
        let uses_volumes = machines(spec).any(|m| m.boot_volume.is_some());
        // A CSI driver makes volumes in Cinder for pods on nodes in Nova's zones: both lists decide
        // which Cinder zone they go to.
        let uses_csi = uses_csi(spec);
        let uses_zones = uses_csi || machines(spec).any(|m| !m.availability_zones.is_empty());
        let uses_types = machines(spec).any(|m| {
            m.boot_volume
                .as_ref()
                .is_some_and(|b| b.volume_type.is_some())
        });

        let mut refs: Vec<ImageRef> = Vec::new();
        for m in machines(spec) {
            if !refs.contains(&m.image.value) {
                refs.push(m.image.value.clone());
            }
        }
        let images = join_all(refs.into_iter().map(|r| async move {
            let found = match &r {
                ImageRef::Ref(ResourceRef::Id(id)) => {
                    image.get_image(id).await.map(|i| i.into_iter().collect())
                }
                ImageRef::Ref(ResourceRef::Name(n)) => {
                    image.list_images(&ImageFilter::name(n)).await
                }
                ImageRef::Tags(t) => {
                    image
                        .list_images(&ImageFilter::tags(t.iter().cloned()))
                        .await
                }
            };
            (r, found)
        }));
        let fips = FloatingIpFilter {
            tags: ours(),
            ..Default::default()
        };
        let groups = SecurityGroupFilter {
            tags: ours(),
            ..Default::default()
        };
        let (all_networks, all_subnets, all_routers, all_ports, all_lbs, our_servers) = (
            NetworkFilter::default(),
            SubnetFilter::default(),
            RouterFilter::default(),
            PortFilter::default(),
            LoadBalancerFilter::default(),
            ours(),
        );
        let volume_filter = VolumeFilter {
            metadata: BTreeMap::from([(TAG_CLUSTER.to_owned(), spec.name.to_string())]),
            ..Default::default()
        };

        let (
            (flavors, images, networks, subnets, routers, ports, zones),
            (
                providers,
                volume_types,
                volume_zones,
                compute_limits,
                network_quotas,
                volume_quotas,
                lb_quotas,
            ),
            (servers, volumes, floating_ips, security_groups, server_groups, load_balancers),
        ) = futures::join!(
            async {
                futures::join!(
                    compute.list_flavors(),
                    images,
                    or_list(listed.map(|l| l.networks.clone()), || network
                        .list_networks(&all_networks)),
                    or_list(listed.map(|l| l.subnets.clone()), || network
                        .list_subnets(&all_subnets)),
                    or_list(listed.map(|l| l.routers.clone()), || network
                        .list_routers(&all_routers)),
                    or_list(listed.map(|l| l.ports.clone()), || network
                        .list_ports(&all_ports)),
                    when(uses_zones, || compute.availability_zones()),
                )
            },
            async {
                futures::join!(
                    when(uses_lb, || lb.list_providers()),
                    when(uses_types, || storage.list_volume_types()),
                    when(uses_volumes || uses_csi, || storage.availability_zones()),
                    compute.limits(),
                    network.quotas(),
                    when(uses_volumes, || storage.quotas()),
                    when(uses_lb, || lb.quotas()),
                )
            },
            async {
                futures::join!(
                    or_list(listed.map(|l| l.servers.clone()), || compute
                        .list_servers(&our_servers)),
                    when(uses_volumes, || storage.list_volumes(&volume_filter)),
                    or_list(
                        listed.map(|l| l
                            .floating_ips
                            .iter()
                            .filter(|f| f.tags.contains(&tag))
                            .cloned()
                            .collect()),
                        || network.list_floating_ips(&fips)
                    ),
                    or_list(
                        listed.map(|l| l
                            .security_groups
                            .iter()
                            .filter(|g| g.tags.contains(&tag))
                            .cloned()
                            .collect()),
                        || network.list_security_groups(&groups)
                    ),
                    or_list(listed.map(|l| l.server_groups.clone()), || compute
                        .list_server_groups()),
                    when(uses_lb, || lb.list_load_balancers(&all_lbs)),
                )
            },
        );
        Facts {
            flavors,
            images,
            networks,
            subnets,
            routers,
            ports,
            zones,
            volume_zones,
            providers,
            volume_types,
            compute_limits,
            network_quotas,
            volume_quotas,
            lb_quotas,
            servers,
            volumes,
            floating_ips,
            security_groups,
            server_groups,
            load_balancers,
            token_roles: session.token_roles(),
        }
    }
}
