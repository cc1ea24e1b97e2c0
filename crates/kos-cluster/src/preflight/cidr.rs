//! CIDR collisions with what the project's routers already reach.
//!
//! A node subnet that overlaps a subnet on one of the project's routers (or a router's extra route, or the
//! external network) gives that router two ways to the same addresses: one side becomes unreachable, and
//! the failure shows up long after `kos up` (field report 002). Pod and service ranges are overlays, so an
//! overlap there only hides the remote range from pods: a warning. Each finding suggests a free range of the
//! same size in the same RFC 1918 block.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use kos_cloud::model::network::Subnet;
use miette::SourceSpan;

use super::resolve::{Net, ROUTER_INTERFACE_OWNERS};
use super::{Cx, some_of};
use crate::diagnostics::{Code, Diagnostic};
use crate::names::cluster_tag;
use crate::resolved::ExternalNetwork;
use crate::spec::{ClusterSpec, NetworkSource, Spanned};

/// A range reachable through the project's routers, and how to name it in a message.
pub(crate) struct Routed {
    pub cidr: Ipv4Net,
    pub what: String,
}

/// The RFC 1918 private blocks; suggestions stay in the block the user chose.
const PRIVATE: [Ipv4Net; 3] = [
    Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8),
    Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16),
];
/// Docker's default bridge: validation already warns about it, so it is never suggested.
const DOCKER: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(172, 17, 0, 0), 16);

pub(crate) fn overlaps(a: Ipv4Net, b: Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Subnets on the project's routers, their extra routes and the external network's subnets; this cluster's
/// own subnet and router (a half-built cluster) and `skip_subnet` (a bring-your-own subnet) left out.
fn routed(
    spec: &ClusterSpec,
    net: &Net<'_>,
    ext: Option<&ExternalNetwork>,
    skip_subnet: Option<&str>,
) -> Vec<Routed> {
    let tag = cluster_tag(&spec.name);
    let v4 = |s: &str| s.parse::<Ipv4Net>().ok();
    let mut out: Vec<Routed> = Vec::new();
    for r in net.routers.iter().filter(|r| !r.tags.contains(&tag)) {
        let interfaces = net.ports.iter().filter(|p| {
            p.device_id == r.id && ROUTER_INTERFACE_OWNERS.contains(&p.device_owner.as_str())
        });
        for ip in interfaces.flat_map(|p| &p.fixed_ips) {
            let Some(s) = net.subnets.iter().find(|s| s.id == ip.subnet_id) else {
                continue;
            };
            if s.tags.contains(&tag) || Some(s.id.as_str()) == skip_subnet {
                continue;
            }
            if let Some(cidr) = v4(&s.cidr) {
                out.push(Routed {
                    cidr,
                    what: format!("subnet `{}` ({cidr}) on router `{}`", s.name, r.name),
                });
            }
        }
        for route in &r.routes {
            if let Some(cidr) = v4(&route.destination).filter(|c| c.prefix_len() > 0) {
                out.push(Routed {
                    cidr,
                    what: format!(
                        "the route to {cidr} via {} on router `{}`",
                        route.nexthop, r.name
                    ),
                });
            }
        }
    }
    if let Some(x) = ext {
        for s in net.subnets.iter().filter(|s| s.network_id == x.id) {
            if let Some(cidr) = v4(&s.cidr) {
                out.push(Routed {
                    cidr,
                    what: format!(
                        "subnet `{}` ({cidr}) of the external network `{}`",
                        s.name, x.name
                    ),
                });
            }
        }
    }
    out.dedup_by(|a, b| a.cidr == b.cidr && a.what == b.what);
    out
}

/// A new node subnet: an error on collision; pod and service ranges: warnings.
pub(crate) fn check_create(
    cx: &mut Cx,
    spec: &ClusterSpec,
    net: &Net<'_>,
    ext: Option<&ExternalNetwork>,
) {
    let NetworkSource::Create(c) = &spec.network.source else {
        return;
    };
    let routed = routed(spec, net, ext, None);
    let (pod, svc) = (spec.network.pod_cidr, spec.network.service_cidr);
    collide(
        cx,
        Role::Nodes,
        "spec.network.create.cidr",
        c.cidr,
        &routed,
        &[pod.value, svc.value],
    );
    collide(
        cx,
        Role::Pods,
        "spec.network.podCIDR",
        pod,
        &routed,
        &[c.cidr.value, svc.value],
    );
    collide(
        cx,
        Role::Services,
        "spec.network.serviceCIDR",
        svc,
        &routed,
        &[c.cidr.value, pod.value],
    );
}

/// A bring-your-own subnet: overlapping the pod or service range is an error (validation could not know the
/// subnet's range); pod and service ranges against other routed ranges are warnings. True when no error.
pub(crate) fn check_existing(
    cx: &mut Cx,
    spec: &ClusterSpec,
    net: &Net<'_>,
    ext: Option<&ExternalNetwork>,
    subnet: &Subnet,
    subnet_cidr: Ipv4Net,
    subnet_span: SourceSpan,
) -> bool {
    let (pod, svc) = (spec.network.pod_cidr, spec.network.service_cidr);
    let mut ok = true;
    for (field, range, other, role) in [
        ("spec.network.podCIDR", pod, svc, "pod"),
        ("spec.network.serviceCIDR", svc, pod, "service"),
    ] {
        if !overlaps(range.value, subnet_cidr) {
            continue;
        }
        ok = false;
        let taken = [subnet_cidr, other.value];
        let free = routed(spec, net, ext, Some(&subnet.id));
        let mut all: Vec<Ipv4Net> = free.iter().map(|r| r.cidr).collect();
        all.extend(taken);
        cx.push(
            Diagnostic::error(
                Code::CidrCollision,
                field,
                format!(
                    "the {role} range {} overlaps the nodes' subnet `{}` ({subnet_cidr})",
                    range.value, subnet.name
                ),
            )
            .label(range.span, format!("{role} range"))
            .label(subnet_span, format!("subnet {subnet_cidr}"))
            .help(suggestion(
                "node, pod and service addresses must be distinct or routing breaks on every node",
                range.value,
                &all,
            )),
        );
    }
    let routed = routed(spec, net, ext, Some(&subnet.id));
    collide(
        cx,
        Role::Pods,
        "spec.network.podCIDR",
        pod,
        &routed,
        &[subnet_cidr, svc.value],
    );
    collide(
        cx,
        Role::Services,
        "spec.network.serviceCIDR",
        svc,
        &routed,
        &[subnet_cidr, pod.value],
    );
    ok
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Nodes,
    Pods,
    Services,
}

fn collide(
    cx: &mut Cx,
    role: Role,
    field: &str,
    range: Spanned<Ipv4Net>,
    routed: &[Routed],
    others: &[Ipv4Net],
) {
    let hits: Vec<&Routed> = routed
        .iter()
        .filter(|r| overlaps(range.value, r.cidr))
        .collect();
    if hits.is_empty() {
        return;
    }
    let mut taken: Vec<Ipv4Net> = routed.iter().map(|r| r.cidr).collect();
    taken.extend_from_slice(others);
    let (what, why) = match role {
        Role::Nodes => (
            "the nodes' subnet",
            "the router would have two routes to the same addresses and one side would be unreachable",
        ),
        Role::Pods => (
            "the pod range",
            "pods could not reach those addresses: the overlay hides them",
        ),
        Role::Services => (
            "the service range",
            "pods could not reach those addresses: kube-proxy captures them",
        ),
    };
    let message = format!(
        "{what} {} overlaps {}",
        range.value,
        some_of(hits.iter().map(|h| h.what.clone()), 6)
    );
    let d = if role == Role::Nodes {
        Diagnostic::error(Code::CidrCollision, field, message)
    } else {
        Diagnostic::warning(Code::CidrCollision, field, message)
    };
    cx.push(
        d.label(range.span, "collides with a routed network")
            .help(suggestion(why, range.value, &taken)),
    );
}

fn suggestion(why: &str, want: Ipv4Net, taken: &[Ipv4Net]) -> String {
    match suggest(want, taken) {
        Some(free) => format!("{why}; use a free range such as {free}"),
        None => format!("{why}; use a range that no router of the project reaches"),
    }
}

/// The first range of `want`'s size, from `want` on (wrapping), in the same RFC 1918 block, that overlaps
/// nothing in `taken`.
pub(crate) fn suggest(want: Ipv4Net, taken: &[Ipv4Net]) -> Option<Ipv4Net> {
    let block = PRIVATE
        .into_iter()
        .find(|b| b.contains(&want))
        .unwrap_or(PRIVATE[0]);
    let len = want.prefix_len().max(block.prefix_len());
    let step_bits = 32 - u32::from(len);
    let count = 1u64 << (u32::from(len) - u32::from(block.prefix_len())).min(20);
    let base = u64::from(u32::from(block.network()));
    let start = if block.contains(&want) {
        (u64::from(u32::from(want.network())) - base) >> step_bits
    } else {
        0
    };
    (0..count)
        .map(|i| (start + i) % count)
        .filter_map(|i| {
            let addr = u32::try_from(base + (i << step_bits)).ok()?;
            Ipv4Net::new(Ipv4Addr::from(addr), len).ok()
        })
        .find(|c| !overlaps(*c, DOCKER) && !taken.iter().any(|t| overlaps(*c, *t)))
}

/// How many addresses the subnet can hand out: its allocation pools, or the range minus network,
/// broadcast and gateway. `None` when the subnet's data does not parse (then it is not checked).
pub(crate) fn capacity(s: &Subnet) -> Option<u64> {
    if s.allocation_pools.is_empty() {
        let cidr: Ipv4Net = s.cidr.parse().ok()?;
        let hosts = 1u64 << (32 - u32::from(cidr.prefix_len()));
        return Some(hosts.saturating_sub(2 + u64::from(s.gateway_ip.is_some())));
    }
    s.allocation_pools.iter().try_fold(0u64, |n, p| {
        let (a, b): (Ipv4Addr, Ipv4Addr) = (p.start.parse().ok()?, p.end.parse().ok()?);
        Some(n + u64::from(u32::from(b).saturating_sub(u32::from(a))) + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap_or_else(|_| panic!("{s}"))
    }

    #[test]
    fn suggestions_keep_size_and_block_and_skip_what_is_taken() {
        let taken = [net("10.0.0.0/24"), net("10.0.1.0/24")];
        assert_eq!(
            suggest(net("10.0.0.0/24"), &taken),
            Some(net("10.0.2.0/24"))
        );
        assert_eq!(
            suggest(net("192.168.0.0/16"), &[net("192.168.0.0/16")]),
            None
        );
        assert_eq!(
            suggest(net("172.16.0.0/12"), &[net("172.16.0.0/16")]),
            None,
            "a /12 has no room left in its own /12 block"
        );
        assert_eq!(
            suggest(net("172.16.0.0/16"), &[net("172.16.0.0/16")]),
            Some(net("172.18.0.0/16"))
        );
        // Wraps around to the start of the block.
        assert_eq!(
            suggest(net("192.168.255.0/24"), &[net("192.168.255.0/24")]),
            Some(net("192.168.0.0/24"))
        );
    }

    #[test]
    fn capacity_counts_pools_or_the_range() {
        let mut s = Subnet {
            cidr: "10.0.0.0/28".into(),
            gateway_ip: Some("10.0.0.1".into()),
            ..Default::default()
        };
        assert_eq!(capacity(&s), Some(13));
        s.allocation_pools = vec![kos_cloud::model::network::AllocationPool {
            start: "10.0.0.2".into(),
            end: "10.0.0.14".into(),
        }];
        assert_eq!(capacity(&s), Some(13));
    }
}
