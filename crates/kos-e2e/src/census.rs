//! What a cluster holds on the cloud, found through kos-cloud's facades directly, never through the
//! engine whose work is being checked: every resource type kos creates, by the cluster's tag, by its
//! `kos-<cluster>-` name prefix and by kos's volume metadata, plus what the cluster's CCM and CSI make
//! (LBs `kube_service_<cluster>_…`, floating IPs and security groups described "… cluster <cluster>",
//! volumes with `cinder.csi.openstack.org/cluster`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::Result;
use futures::try_join;
use kos_cloud::Session;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::model::network::{
    FloatingIpFilter, NetworkFilter, PortFilter, RouterFilter, SecurityGroupFilter, SubnetFilter,
};

/// The tag key kos puts on everything (also kos's volume metadata key).
pub const TAG_CLUSTER: &str = "kos-cluster";
/// The metadata key of the volumes the Cinder CSI driver makes.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";

/// One cloud object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Obj {
    pub kind: &'static str,
    /// The name (a floating IP's description; a keypair's name is also its id).
    pub name: String,
    pub id: String,
}

impl fmt::Display for Obj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.kind, self.name, self.id)
    }
}

/// Every object of one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census(pub BTreeSet<Obj>);

impl Census {
    /// The object of `kind` named `name` (a floating IP: described).
    pub fn named(&self, kind: &str, name: &str) -> Option<&Obj> {
        self.0.iter().find(|o| o.kind == kind && o.name == name)
    }

    pub fn of_kind(&self, kind: &str) -> impl Iterator<Item = &Obj> {
        self.0.iter().filter(move |o| o.kind == kind)
    }

    /// What `after` has that `self` had not, and what `self` had that `after` has not.
    pub fn diff(&self, after: &Census) -> (BTreeSet<Obj>, BTreeSet<Obj>) {
        (
            after.0.difference(&self.0).cloned().collect(),
            self.0.difference(&after.0).cloned().collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One object per line.
    pub fn list(&self) -> String {
        show(&self.0)
    }
}

/// One object per line.
pub fn show<'a>(objs: impl IntoIterator<Item = &'a Obj>) -> String {
    objs.into_iter()
        .map(|o| format!("  {o}\n"))
        .collect::<String>()
}

/// Lists everything of `cluster` (see the module doc).
pub async fn census(s: &Session, cluster: &str) -> Result<Census> {
    let tag = format!("{TAG_CLUSTER}={cluster}");
    let prefix = format!("kos-{cluster}-");
    let ccm_lb = format!("kube_service_{cluster}_");
    let ccm_desc = format!("from cluster {cluster}");
    let ccm_sg = format!("in cluster {cluster}");
    let tagged = || TagQuery::all([tag.as_str()]);
    let has = |tags: &[String]| tags.contains(&tag);
    let named = |n: &str| n.starts_with(&prefix);
    let (net, comp, lb, bs, id) = (
        s.network(),
        s.compute(),
        s.load_balancer(),
        s.block_storage(),
        s.identity(),
    );
    let meta = |k: &str| VolumeFilter {
        metadata: BTreeMap::from([(k.to_owned(), cluster.to_owned())]),
        ..VolumeFilter::default()
    };
    // Everything, and the same lists by tag: a tag filter the cloud ignored would show up as a
    // difference between the two ways of asking.
    let all = TagQuery::default();
    let (nf, sf, rf, pf, gf, ff) = (
        NetworkFilter::default(),
        SubnetFilter::default(),
        RouterFilter::default(),
        PortFilter::default(),
        SecurityGroupFilter::default(),
        FloatingIpFilter::default(),
    );
    let (t_nf, t_sf, t_rf, t_pf, t_gf, t_ff) = (
        NetworkFilter {
            tags: tagged(),
            ..nf.clone()
        },
        SubnetFilter {
            tags: tagged(),
            ..sf.clone()
        },
        RouterFilter {
            tags: tagged(),
            ..rf.clone()
        },
        PortFilter {
            tags: tagged(),
            ..pf.clone()
        },
        SecurityGroupFilter {
            tags: tagged(),
            ..gf.clone()
        },
        FloatingIpFilter {
            tags: tagged(),
            ..ff.clone()
        },
    );
    let (lf, t_lf) = (
        LoadBalancerFilter::default(),
        LoadBalancerFilter {
            tags: tagged(),
            ..LoadBalancerFilter::default()
        },
    );
    let (vf, kos_vf, csi_vf) = (
        VolumeFilter::default(),
        meta(TAG_CLUSTER),
        meta(CSI_CLUSTER_KEY),
    );
    let t_servers_q = tagged();
    let (networks, subnets, routers, ports, groups, fips) = try_join!(
        net.list_networks(&nf),
        net.list_subnets(&sf),
        net.list_routers(&rf),
        net.list_ports(&pf),
        net.list_security_groups(&gf),
        net.list_floating_ips(&ff),
    )?;
    let (t_networks, t_subnets, t_routers, t_ports, t_groups, t_fips) = try_join!(
        net.list_networks(&t_nf),
        net.list_subnets(&t_sf),
        net.list_routers(&t_rf),
        net.list_ports(&t_pf),
        net.list_security_groups(&t_gf),
        net.list_floating_ips(&t_ff),
    )?;
    let (servers, t_servers, lbs, t_lbs) = try_join!(
        comp.list_servers(&all),
        comp.list_servers(&t_servers_q),
        lb.list_load_balancers(&lf),
        lb.list_load_balancers(&t_lf),
    )?;
    let (volumes, kos_volumes, csi_volumes) = try_join!(
        bs.list_volumes(&vf),
        bs.list_volumes(&kos_vf),
        bs.list_volumes(&csi_vf),
    )?;
    let (keypairs, server_groups, creds) = try_join!(
        comp.list_keypairs(),
        comp.list_server_groups(),
        id.list_application_credentials(None),
    )?;

    let mut out = BTreeSet::new();
    let mut add = |kind: &'static str, name: &str, id: &str| {
        out.insert(Obj {
            kind,
            name: name.to_owned(),
            id: id.to_owned(),
        });
    };
    for x in networks.iter().filter(|x| has(&x.tags) || named(&x.name)) {
        add("network", &x.name, &x.id);
    }
    for x in &t_networks {
        add("network", &x.name, &x.id);
    }
    for x in subnets.iter().filter(|x| has(&x.tags) || named(&x.name)) {
        add("subnet", &x.name, &x.id);
    }
    for x in &t_subnets {
        add("subnet", &x.name, &x.id);
    }
    for x in routers.iter().filter(|x| has(&x.tags) || named(&x.name)) {
        add("router", &x.name, &x.id);
    }
    for x in &t_routers {
        add("router", &x.name, &x.id);
    }
    for x in ports.iter().filter(|x| has(&x.tags) || named(&x.name)) {
        add("port", &x.name, &x.id);
    }
    for x in &t_ports {
        add("port", &x.name, &x.id);
    }
    let ccm_group = |name: &str, desc: &str| name.starts_with("lb-sg-") && desc.ends_with(&ccm_sg);
    for x in groups
        .iter()
        .filter(|x| has(&x.tags) || named(&x.name) || ccm_group(&x.name, &x.description))
    {
        add("security group", &x.name, &x.id);
    }
    for x in &t_groups {
        add("security group", &x.name, &x.id);
    }
    for x in fips.iter().filter(|x| {
        has(&x.tags) || named(&x.description) || x.description.trim_end().ends_with(&ccm_desc)
    }) {
        add("floating ip", &x.description, &x.id);
    }
    for x in &t_fips {
        add("floating ip", &x.description, &x.id);
    }
    for x in servers.iter().filter(|x| has(&x.tags) || named(&x.name)) {
        add("server", &x.name, &x.id);
    }
    for x in &t_servers {
        add("server", &x.name, &x.id);
    }
    for x in lbs
        .iter()
        .filter(|x| has(&x.tags) || named(&x.name) || x.name.starts_with(&ccm_lb))
    {
        add("load balancer", &x.name, &x.id);
    }
    for x in &t_lbs {
        add("load balancer", &x.name, &x.id);
    }
    let csi = |m: &BTreeMap<String, String>| {
        [TAG_CLUSTER, CSI_CLUSTER_KEY]
            .iter()
            .any(|k| m.get(*k).map(String::as_str) == Some(cluster))
    };
    for x in volumes
        .iter()
        .filter(|x| named(&x.name) || csi(&x.metadata))
    {
        add("volume", &x.name, &x.id);
    }
    for x in kos_volumes.iter().chain(&csi_volumes) {
        add("volume", &x.name, &x.id);
    }
    for x in keypairs.iter().filter(|x| named(&x.name)) {
        add("keypair", &x.name, &x.name);
    }
    for x in server_groups.iter().filter(|x| named(&x.name)) {
        add("server group", &x.name, &x.id);
    }
    for x in creds.iter().filter(|x| named(&x.name)) {
        add("application credential", &x.name, &x.id);
    }
    Ok(Census(out))
}
