//! The floating IP of a Service's load balancer (upstream `ensureFloatingIP`, research/occm.md
//! §1.4), decided from the bulk observation and then applied with at most a few Neutron calls.
//!
//! Rules, in order: a floating IP already on the VIP port is used (an internal owner detaches it,
//! and deletes it if a CCM made it and `keep-floatingip` is not set); a Service sharing someone
//! else's load balancer never adds one; `spec.loadBalancerIP` names a free floating IP of the project
//! to attach (never one kos made for a cluster or one a CCM made for another Service:
//! [`naming::fip_claim`]), or, when it does not exist, one to create with that address; a floating
//! IP this Service's
//! CCM made earlier and that is now free (detached behind our back, or left by a load balancer that
//! went to ERROR) is attached again, so the address survives; otherwise a new one is made on the
//! floating network, trying each matching subnet. Only floating IPs whose description says a CCM
//! made them are ever deleted.

use std::net::IpAddr;

use kos_cloud::model::network::{FloatingIp, FloatingIpCreate, NetworkFilter, SubnetFilter};
use kos_cloud::{CloudError, Session};

use super::annotations::{FloatingSubnet, ServiceOptions};
use super::naming;
use super::observed::Observed;
use super::outcome::{Outcome, reasons};

/// What to do about the floating IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FipDecision {
    /// Internal, or nothing to do: the VIP is the address.
    UseVip,
    /// The floating IP on the VIP port stays.
    Keep(FloatingIp),
    /// Attach this free floating IP to the VIP port.
    Attach { fip: FloatingIp, why: &'static str },
    /// Make a new one (with this address, for `spec.loadBalancerIP`).
    Create { address: Option<String> },
    /// Internal now: detach (not ours to delete, or `keep-floatingip`).
    Detach(FloatingIp),
    /// Internal now: ours, not kept: delete.
    Delete(FloatingIp),
    /// Cannot have one; the note says why and what to do.
    Refuse { reason: &'static str, note: String },
}

/// Inputs of [`decide`].
pub struct FipInput<'a> {
    pub observed: &'a Observed,
    pub vip_port_id: &'a str,
    pub internal: bool,
    /// The Service the load balancer was made for (only it manages the floating IP).
    pub owner: bool,
    pub keep: bool,
    pub load_balancer_ip: Option<IpAddr>,
    /// This Service's CCM floating-IP description.
    pub description: &'a str,
}

pub fn decide(i: &FipInput) -> FipDecision {
    let on_port = i.observed.fip_on_port(i.vip_port_id);
    if i.internal {
        return match on_port {
            Some(f) if i.owner => {
                if !i.keep && naming::fip_made_by_ccm(&f.description) {
                    FipDecision::Delete(f.clone())
                } else {
                    FipDecision::Detach(f.clone())
                }
            }
            _ => FipDecision::UseVip,
        };
    }
    if let Some(f) = on_port {
        return FipDecision::Keep(f.clone());
    }
    if !i.owner {
        return FipDecision::Refuse {
            reason: reasons::FLOATING_IP_SKIPPED,
            note: "this Service shares a load balancer it did not create, and that load balancer \
                   has no floating IP: only the Service that owns it can add one (a shared internal \
                   load balancer must not be exposed by accident); make the owning Service external"
                .into(),
        };
    }
    if let Some(ip) = i.load_balancer_ip {
        let address = ip.to_string();
        return match i.observed.fip_with_address(&address) {
            Some(f) if f.port_id.is_none() => {
                match naming::fip_claim(&f.tags, &f.description, i.description) {
                    None => FipDecision::Attach {
                        fip: f.clone(),
                        why: "spec.loadBalancerIP",
                    },
                    Some(why) => FipDecision::Refuse {
                        reason: reasons::FLOATING_IP_FAILED,
                        note: format!(
                            "floating IP {address} (spec.loadBalancerIP) is not this Service's to \
                             take: {why}; choose another address, or one allocated for it"
                        ),
                    },
                }
            }
            Some(f) => FipDecision::Refuse {
                reason: reasons::FLOATING_IP_FAILED,
                note: format!(
                    "floating IP {address} (spec.loadBalancerIP) is not available: it is attached \
                     to port {}; free it or choose another address",
                    f.port_id.as_deref().unwrap_or_default()
                ),
            },
            None => FipDecision::Create {
                address: Some(address),
            },
        };
    }
    match i
        .observed
        .fips_described(i.description)
        .into_iter()
        .find(|f| f.port_id.is_none())
    {
        Some(f) => FipDecision::Attach {
            fip: f.clone(),
            why: "this Service's floating IP, found detached",
        },
        None => FipDecision::Create { address: None },
    }
}

/// The address to report, after the floating IP step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FipResult {
    /// This address is the Service's (floating IP or VIP).
    Address(String),
    /// Not settled yet (a warning or a change in flight); report nothing new.
    Pending,
}

fn fail(out: &mut Outcome, what: &str, e: &CloudError) -> FipResult {
    out.warning(reasons::FLOATING_IP_FAILED, format!("{what}: {e}"));
    FipResult::Pending
}

/// Applies [`decide`]'s answer. Neutron refusals (quota, policy, no router, address taken) become
/// Warning events; only transport-level failures are errors.
pub async fn ensure(
    session: &Session,
    input: &FipInput<'_>,
    opts: &ServiceOptions,
    vip_address: &str,
    out: &mut Outcome,
) -> Result<FipResult, CloudError> {
    let net = session.network();
    match decide(input) {
        FipDecision::UseVip => Ok(FipResult::Address(vip_address.to_owned())),
        FipDecision::Keep(f) => {
            if let Some(ip) = input.load_balancer_ip
                && ip.to_string() != f.floating_ip_address
            {
                out.warning(
                    reasons::IMMUTABLE,
                    format!(
                        "spec.loadBalancerIP {ip} is not applied: the load balancer already has \
                         floating IP {}, and moving it would cut traffic (upstream #2443); recreate \
                         the Service to change the address",
                        f.floating_ip_address
                    ),
                );
            }
            Ok(FipResult::Address(f.floating_ip_address))
        }
        FipDecision::Attach { fip, why } => {
            match net
                .associate_floating_ip(&fip.id, input.vip_port_id, None)
                .await
            {
                Ok(f) => {
                    out.writes.push(format!(
                        "attach floating IP {} ({why})",
                        f.floating_ip_address
                    ));
                    Ok(FipResult::Address(f.floating_ip_address))
                }
                Err(e) if is_refusal(&e) => Ok(fail(
                    out,
                    &format!("cannot attach floating IP {}", fip.floating_ip_address),
                    &e,
                )),
                Err(e) => Err(e),
            }
        }
        FipDecision::Create { address } => create(session, input, opts, address, out).await,
        FipDecision::Detach(f) => {
            match net.disassociate_floating_ip(&f.id).await {
                Ok(_) => {
                    out.writes
                        .push(format!("detach floating IP {}", f.floating_ip_address));
                }
                Err(e) if is_refusal(&e) => {
                    return Ok(fail(out, "cannot detach the floating IP", &e));
                }
                Err(e) => return Err(e),
            }
            Ok(FipResult::Address(vip_address.to_owned()))
        }
        FipDecision::Delete(f) => {
            match net.delete_floating_ip(&f.id).await {
                Ok(()) => out
                    .writes
                    .push(format!("delete floating IP {}", f.floating_ip_address)),
                Err(e) if is_refusal(&e) => {
                    return Ok(fail(out, "cannot delete the floating IP", &e));
                }
                Err(e) => return Err(e),
            }
            Ok(FipResult::Address(vip_address.to_owned()))
        }
        FipDecision::Refuse { reason, note } => {
            out.warning(reason, note);
            Ok(FipResult::Pending)
        }
    }
}

/// Neutron said no for a reason the user can act on.
fn is_refusal(e: &CloudError) -> bool {
    use kos_cloud::ApiErrorKind::*;
    matches!(
        e.kind(),
        Some(BadRequest | Forbidden | NotFound | Conflict | OverQuota)
    )
}

async fn floating_network(
    session: &Session,
    opts: &ServiceOptions,
    out: &mut Outcome,
) -> Result<Option<String>, CloudError> {
    if let Some(id) = &opts.floating_network_id {
        return Ok(Some(id.clone()));
    }
    // Autodetect as the upstream `GetFloatingNetworkID` does: the first external network with a
    // subnet. Only needed when a floating IP is made, so it is not a per-resync cost here.
    let nets = session
        .network()
        .list_networks(&NetworkFilter {
            external: Some(true),
            ..Default::default()
        })
        .await;
    match nets {
        Ok(nets) => Ok(nets
            .into_iter()
            .find(|n| !n.subnets.is_empty())
            .map(|n| n.id)),
        Err(e) if is_refusal(&e) => {
            out.warning(
                reasons::EXTERNAL_NETWORK_SEARCH_FAILED,
                format!(
                    "cannot search for the external network: {e}; set [LoadBalancer] \
                     floating-network-id"
                ),
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

async fn create(
    session: &Session,
    input: &FipInput<'_>,
    opts: &ServiceOptions,
    address: Option<String>,
    out: &mut Outcome,
) -> Result<FipResult, CloudError> {
    let Some(network) = floating_network(session, opts, out).await? else {
        out.warning(
            reasons::FORCED_INTERNAL,
            "no floating network is configured and none with router:external was found: the \
             Service stays internal; set [LoadBalancer] floating-network-id or the \
             loadbalancer.openstack.org/floating-network-id annotation",
        );
        return Ok(FipResult::Pending);
    };
    let subnets: Vec<Option<String>> = match &opts.floating_subnet {
        FloatingSubnet::Any => vec![None],
        FloatingSubnet::Id(id) => vec![Some(id.clone())],
        // An address names its own subnet; the pattern would only get in the way.
        FloatingSubnet::Matching { .. } if address.is_some() => vec![None],
        FloatingSubnet::Matching { name, tags } => {
            let all = session
                .network()
                .list_subnets(&SubnetFilter {
                    network_id: Some(network.clone()),
                    ..Default::default()
                })
                .await?;
            let hits: Vec<Option<String>> = all
                .into_iter()
                .filter(|s| name.as_ref().is_none_or(|p| p.matches(&s.name)))
                .filter(|s| tags.as_ref().is_none_or(|t| t.matches(&s.tags)))
                .map(|s| Some(s.id))
                .collect();
            if hits.is_empty() {
                out.warning(
                    reasons::FLOATING_IP_FAILED,
                    format!(
                        "no subnet of floating network {network} matches the floating-subnet \
                         settings; check the floating-subnet / floating-subnet-tags values"
                    ),
                );
                return Ok(FipResult::Pending);
            }
            hits
        }
    };
    let mut last = None;
    for subnet in subnets {
        let req = FloatingIpCreate {
            floating_network_id: network.clone(),
            description: Some(input.description.to_owned()),
            port_id: Some(input.vip_port_id.to_owned()),
            subnet_id: subnet,
            floating_ip_address: address.clone(),
            ..Default::default()
        };
        match session.network().create_floating_ip(&req).await {
            Ok(f) => {
                out.writes
                    .push(format!("create floating IP {}", f.floating_ip_address));
                return Ok(FipResult::Address(f.floating_ip_address));
            }
            // Ambiguous: the next pass finds it by its description, free or attached.
            Err(e) if is_refusal(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    let what = match &address {
        Some(a) => format!(
            "cannot create floating IP {a} (spec.loadBalancerIP; Neutron's default policy lets \
             only admins choose the address, so allocate it first)"
        ),
        None => format!("cannot create a floating IP on network {network}"),
    };
    match last {
        Some(e) => Ok(fail(out, &what, &e)),
        None => Ok(FipResult::Pending),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(fips: Vec<FloatingIp>) -> Observed {
        let mut o = Observed::empty();
        o.floating_ips = fips;
        o
    }

    fn tagged(mut f: FloatingIp, tags: &[&str]) -> FloatingIp {
        f.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        f
    }

    fn fip(id: &str, addr: &str, port: Option<&str>, desc: &str) -> FloatingIp {
        FloatingIp {
            id: id.into(),
            floating_ip_address: addr.into(),
            port_id: port.map(Into::into),
            description: desc.into(),
            ..Default::default()
        }
    }

    const OURS: &str = "Floating IP for Kubernetes external service ns/web from cluster c";

    fn input<'a>(o: &'a Observed) -> FipInput<'a> {
        FipInput {
            observed: o,
            vip_port_id: "vip",
            internal: false,
            owner: true,
            keep: false,
            load_balancer_ip: None,
            description: OURS,
        }
    }

    #[test]
    fn a_floating_ip_on_the_vip_port_is_kept() {
        let o = observed(vec![fip("f", "172.24.4.9", Some("vip"), "")]);
        assert!(matches!(decide(&input(&o)), FipDecision::Keep(f) if f.id == "f"));
    }

    #[test]
    fn going_internal_deletes_only_what_a_ccm_made_and_honours_keep() {
        let o = observed(vec![fip("f", "172.24.4.9", Some("vip"), OURS)]);
        let i = FipInput {
            internal: true,
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Delete(_)));
        let i = FipInput {
            internal: true,
            keep: true,
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Detach(_)));
        let o = observed(vec![fip("f", "172.24.4.9", Some("vip"), "user's")]);
        let i = FipInput {
            internal: true,
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Detach(_)));
    }

    #[test]
    fn load_balancer_ip_is_reused_when_free_and_refused_when_taken() {
        let o = observed(vec![fip("f", "172.24.4.50", None, "")]);
        let i = FipInput {
            load_balancer_ip: Some("172.24.4.50".parse().expect("ip")),
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Attach { fip, .. } if fip.id == "f"));
        let o = observed(vec![fip("f", "172.24.4.50", Some("other"), "")]);
        let i = FipInput {
            load_balancer_ip: Some("172.24.4.50".parse().expect("ip")),
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Refuse { .. }));
        let o = observed(vec![]);
        let i = FipInput {
            load_balancer_ip: Some("172.24.4.51".parse().expect("ip")),
            ..input(&o)
        };
        assert_eq!(
            decide(&i),
            FipDecision::Create {
                address: Some("172.24.4.51".into())
            }
        );
    }

    /// Issue 19 item 5: any free floating IP of the project was taken, kos's API one included
    /// (free between its allocation and its association).
    #[test]
    fn load_balancer_ip_never_takes_kos_s_or_another_service_s_floating_ip() {
        fn ip<'a>(i: FipInput<'a>) -> FipInput<'a> {
            FipInput {
                load_balancer_ip: Some("172.24.4.50".parse().expect("ip")),
                ..i
            }
        }
        let refused = |fips: Vec<FloatingIp>, what: &str| {
            let o = observed(fips);
            match decide(&ip(input(&o))) {
                FipDecision::Refuse { reason, note } => {
                    assert_eq!(reason, reasons::FLOATING_IP_FAILED);
                    assert!(note.contains("spec.loadBalancerIP"), "{note}");
                    assert!(note.contains(what), "{note}");
                }
                other => panic!("{what}: {other:?}"),
            }
        };
        // kos's API floating IP, tagged by kos.
        refused(
            vec![tagged(
                fip("api", "172.24.4.50", None, "kos-c-api-fip"),
                &["kos-cluster=c", "kos-id=api-fip"],
            )],
            "kos-cluster=c",
        );
        // The same before kos's tag PUT: its description is a kos object's name.
        refused(
            vec![fip("api", "172.24.4.50", None, "kos-c-api-fip")],
            "kos-c-api-fip",
        );
        // Another Service's, detached (keep-floatingip, or its load balancer being recreated).
        refused(
            vec![fip(
                "theirs",
                "172.24.4.50",
                None,
                "Floating IP for Kubernetes external service other/db from cluster c",
            )],
            "another Service",
        );
        // A truly free one, untagged and undescribed, is taken, as upstream; so is our own.
        for d in ["", OURS] {
            let o = observed(vec![fip("free", "172.24.4.50", None, d)]);
            assert!(
                matches!(decide(&ip(input(&o))), FipDecision::Attach { fip, .. } if fip.id == "free")
            );
        }
    }

    #[test]
    fn our_detached_floating_ip_is_attached_again() {
        let o = observed(vec![
            fip("other", "172.24.4.3", None, "someone else's"),
            fip("mine", "172.24.4.7", None, OURS),
        ]);
        assert!(matches!(decide(&input(&o)), FipDecision::Attach { fip, .. } if fip.id == "mine"));
    }

    #[test]
    fn a_sharing_service_never_adds_a_floating_ip() {
        let o = observed(vec![]);
        let i = FipInput {
            owner: false,
            ..input(&o)
        };
        assert!(matches!(decide(&i), FipDecision::Refuse { .. }));
    }
}
