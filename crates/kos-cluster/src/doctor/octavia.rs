//! Octavia's datapath, per provider: which address a load balancer's traffic to its members comes
//! from, and where `allowed_cidrs` is enforced. Read in upstream code (docs/doctor.md lists the files):
//!
//! - **amphora**: a proxy in a service VM. It plugs a port `octavia-lb-vrrp-<amphora id>` into the VIP
//!   network (the VIP is an allowed address pair of it), and for members on other networks a port
//!   `octavia-lb-member-<amphora id>` per network, with a fixed IP on each member subnet
//!   (`CalculateAmphoraDelta`, `HandleNetworkDelta`). The VRRP address is the interface's primary one,
//!   the VIP a /32 beside it (`interface_file.py`), so members see the amphora's own address on their
//!   subnet, never the client's nor the VIP. Health checks come from the same place. `allowed_cidrs`
//!   become the ingress rules of Octavia's VIP group (`_update_security_group_rules`), whose egress it
//!   leaves as Neutron made it: open.
//! - **ovn**: OVN load balancing is DNAT only: members see the client's own address, so source ranges
//!   must be enforced by the member ports' groups; the provider refuses `allowed_cidrs`
//!   (`_check_for_allowed_cidrs`). Health checks come from the provider's port `ovn-lb-hm-<subnet>`
//!   (port security off) on the member's subnet (`_ensure_hm_ovn_port`); a member without a subnet is
//!   on the VIP subnet.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::model::{Listener, LoadBalancer, Member, Port, PortSecurity, Provider, Snapshot};
use super::neutron::{Neutron, Peer, Traffic};
use super::ranges;
use super::report::Finding;

/// Name prefix of an amphora's port on the VIP network (`AMP_BASE_PORT_PREFIX`).
pub const AMPHORA_VRRP_PREFIX: &str = "octavia-lb-vrrp-";
/// Name prefix of ovn-octavia-provider's health-check ports (`LB_HM_PORT_PREFIX`).
pub const OVN_HM_PREFIX: &str = "ovn-lb-hm-";

/// Where a load balancer's packets to one member come from.
#[derive(Debug)]
pub enum Sender<'a> {
    /// Ports of the LB's own, each with the address it sends from.
    Ports {
        ports: Vec<(&'a Port, IpAddr)>,
        /// `amphora port`, `OVN health-check port`.
        role: &'static str,
        /// How that address was chosen.
        note: String,
    },
    /// The client itself (OVN keeps its address).
    Client,
    Unknown(String),
}

/// The subnet a member is on: its own, the one holding its address, or the VIP's.
fn member_subnet<'a>(snap: &'a Snapshot, lb: &'a LoadBalancer, m: &'a Member) -> Option<&'a str> {
    m.subnet_id
        .as_deref()
        .or_else(|| {
            snap.subnets
                .iter()
                .find(|s| s.cidr.contains(&m.address))
                .map(|s| s.id.as_str())
        })
        .or(lb.vip_subnet_id.as_deref())
}

/// The amphorae's ports, by amphora (VM): its VRRP port (the one holding the VIP as an allowed address
/// pair) and the member ports plugged into the same VM.
fn amphorae<'a>(snap: &'a Snapshot, lb: &LoadBalancer) -> BTreeMap<&'a str, Vec<&'a Port>> {
    let mut out: BTreeMap<&str, Vec<&Port>> = BTreeMap::new();
    let Some(vip) = lb.vip_address else {
        return out;
    };
    for vrrp in snap.ports.iter().filter(|p| {
        p.name.starts_with(AMPHORA_VRRP_PREFIX) && p.allowed_pairs.iter().any(|n| n.contains(&vip))
    }) {
        let key = if vrrp.device_id.is_empty() {
            vrrp.id.as_str()
        } else {
            vrrp.device_id.as_str()
        };
        let ports = out.entry(key).or_default();
        ports.push(vrrp);
        if !vrrp.device_id.is_empty() {
            ports.extend(
                snap.ports
                    .iter()
                    .filter(|p| p.id != vrrp.id && p.device_id == vrrp.device_id),
            );
        }
    }
    out
}

/// Where the load balancer's connections to member `m` come from.
#[must_use]
pub fn data_sender<'a>(snap: &'a Snapshot, lb: &'a LoadBalancer, m: &'a Member) -> Sender<'a> {
    match &lb.provider {
        Provider::Amphora => amphora_sender(snap, lb, m),
        Provider::Ovn => Sender::Client,
        Provider::Other(p) => Sender::Unknown(format!(
            "provider {p:?}: doctor does not know which address its traffic to members comes from"
        )),
    }
}

/// Where the load balancer's health checks of member `m` come from.
#[must_use]
pub fn monitor_sender<'a>(snap: &'a Snapshot, lb: &'a LoadBalancer, m: &'a Member) -> Sender<'a> {
    match &lb.provider {
        Provider::Amphora => amphora_sender(snap, lb, m),
        Provider::Ovn => {
            let Some(subnet) = member_subnet(snap, lb, m) else {
                return Sender::Unknown(format!(
                    "member {} has no subnet and LB {} no VIP subnet",
                    m.address, lb.name
                ));
            };
            let name = format!("{OVN_HM_PREFIX}{subnet}");
            match snap.ports.iter().find(|p| p.name == name) {
                Some(p) => match p.address_on(subnet) {
                    Some(a) => Sender::Ports {
                        ports: vec![(p, a)],
                        role: "OVN health-check port",
                        note: format!("OVN probes members from its health-check port {name}"),
                    },
                    None => Sender::Unknown(format!(
                        "health-check port {name} has no address on its subnet"
                    )),
                },
                None => Sender::Unknown(format!(
                    "no OVN health-check port {name} is visible: OVN probes members from that port's address \
                     on the member subnet"
                )),
            }
        }
        Provider::Other(p) => Sender::Unknown(format!(
            "provider {p:?}: doctor does not know where its health checks come from"
        )),
    }
}

fn amphora_sender<'a>(snap: &'a Snapshot, lb: &'a LoadBalancer, m: &'a Member) -> Sender<'a> {
    let amphorae = amphorae(snap, lb);
    if amphorae.is_empty() {
        return Sender::Unknown(format!(
            "the amphora ports of LB {} ({AMPHORA_VRRP_PREFIX}…) are not visible to this project: Octavia \
             connects to members from the amphora's own port on the member subnet",
            lb.name
        ));
    }
    let subnet = member_subnet(snap, lb, m);
    let mut senders = Vec::new();
    let mut routed = false;
    for ports in amphorae.values() {
        let on_subnet =
            subnet.and_then(|s| ports.iter().find_map(|p| p.address_on(s).map(|a| (*p, a))));
        match on_subnet {
            Some(x) => senders.push(x),
            None => {
                // Not plugged into the member's subnet: routed out of the VIP network's port.
                routed = true;
                if let Some(p) = ports.first()
                    && let Some(a) = lb
                        .vip_subnet_id
                        .as_deref()
                        .and_then(|s| p.address_on(s))
                        .or(p.address())
                {
                    senders.push((p, a));
                }
            }
        }
    }
    let note = if routed {
        "the amphora has no port on the member's subnet: it connects from its VIP-network address, routed".to_owned()
    } else {
        "the amphora connects from its own port on the member subnet (not the client's address)"
            .to_owned()
    };
    Sender::Ports {
        ports: senders,
        role: "amphora port",
        note,
    }
}

/// What leaves one of the LB's own ports: anti-spoofing, and egress as far as it can be read. Octavia's
/// groups on its ports belong to its own project and are not visible; they keep Neutron's default
/// egress rules (Octavia adds ingress rules only).
#[must_use]
pub fn sent_from(
    n: &Neutron<'_>,
    port: &Port,
    src: IpAddr,
    dst: &Peer,
    traffic: Traffic,
) -> Finding {
    let snap = n.snapshot();
    let hidden = match &port.security {
        PortSecurity::Enabled { groups } => groups.iter().any(|g| snap.group(g).is_none()),
        PortSecurity::Disabled => false,
    };
    if hidden {
        n.anti_spoofing(port, ranges::host(src))
            .then(Finding::allowed(format!(
                "egress from {}: Octavia's own security groups keep Neutron's default egress rules",
                port.label()
            )))
    } else {
        n.egress(port, ranges::host(src), dst, traffic)
    }
}

/// Whether the listener lets `client` in before any member is involved.
#[must_use]
pub fn listener_admits(lb: &LoadBalancer, l: &Listener, client: &Peer) -> Finding {
    match &lb.provider {
        Provider::Amphora if l.allowed_cidrs.is_empty() => Finding::allowed(format!(
            "listener {} of LB {} has no allowed_cidrs: it admits everyone",
            l.label(),
            lb.name
        )),
        Provider::Amphora => {
            let cidrs: Vec<String> = l.allowed_cidrs.iter().map(ToString::to_string).collect();
            match ranges::uncovered(client.net, &l.allowed_cidrs) {
                None => Finding::allowed(format!(
                    "listener {} of LB {} admits {} (allowed_cidrs {})",
                    l.label(),
                    lb.name,
                    client.shown(),
                    cidrs.join(", ")
                )),
                Some(gap) => Finding::blocked(format!(
                    "listener {} of LB {} admits only {} (allowed_cidrs, enforced by Octavia's VIP security \
                     group): {} is refused{}",
                    l.label(),
                    lb.name,
                    cidrs.join(", "),
                    client.shown(),
                    if gap == ranges::Range::from(client.net) {
                        String::new()
                    } else {
                        format!(" ({gap} of it)")
                    }
                )),
            }
        }
        Provider::Ovn => Finding::allowed(if l.allowed_cidrs.is_empty() {
            format!(
                "OVN load balancer {}: no listener filtering; the member ports' security groups see the client's address",
                lb.name
            )
        } else {
            format!(
                "OVN load balancer {}: the OVN provider does not enforce allowed_cidrs (it refuses them); only \
                 the member ports' security groups filter clients",
                lb.name
            )
        }),
        Provider::Other(p) => Finding::unknown(format!(
            "provider {p:?}: doctor does not know whether it enforces allowed_cidrs"
        )),
    }
}

/// `kube_service_<cluster>_<namespace>_<name>` → `<namespace>/<name>`: best effort, namespaces have no
/// underscore but names of LBs are cut at 255 characters.
#[must_use]
pub fn service_of(cluster: &str, lb_name: &str) -> Option<String> {
    let rest = lb_name.strip_prefix(&format!("kube_service_{cluster}_"))?;
    let (ns, name) = rest.split_once('_')?;
    Some(format!("{ns}/{name}"))
}
