//! `[LoadBalancer] manage-security-groups`: one Neutron security group per Service, opening the
//! Service's node ports on the nodes' ports (upstream `pkg/openstack/loadbalancer_sg.go`).
//!
//! The group is named `lb-sg-<uid>-<namespace>-<name>` and described like the upstream's, so
//! groups the upstream CCM made are adopted. Its ingress rules are one per Service port (protocol,
//! `nodePort`) and remote: the member subnet's CIDR for amphora (the amphora is the client), each
//! source range for OVN (it keeps the client's address, upstream #2291); plus TCP on the
//! `healthCheckNodePort` from the member subnet. The group goes onto every port-security-enabled
//! Neutron port carrying a member address on the member subnet, next to the port's other groups,
//! and the port is tagged with the group id (upstream finds the ports by that tag on delete).
//!
//! Invariants: rules are diffed, never recreated; egress rules (Neutron's defaults) are left
//! alone; an empty wanted set never deletes rules (upstream #2699 wiped every rule); a port
//! carrying the group but no longer a member loses it (upstream #2058 only ever added); a pass
//! with nothing to change writes nothing. Reads per pass: the member subnet, the group by name
//! (its rules come with it) and the member network's ports.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kos_cloud::model::common::TagQuery;
use kos_cloud::model::network::{
    Direction, EtherType, Port, PortFilter, PortUpdate, Remote, SecurityGroup, SecurityGroupCreate,
    SecurityGroupFilter, SecurityGroupRule, SecurityGroupRuleCreate, TaggedKind,
};
use kos_cloud::{CloudError, Session};

use super::annotations::SOURCE_RANGES;
use super::desired::health_check_node_port;

const MAX_NAME: usize = 255;

/// `lb-sg-<uid>-<namespace>-<name>`, cut to 255 bytes (upstream `getSecurityGroupName`).
pub fn sg_name(uid: &str, namespace: &str, name: &str) -> String {
    let mut s = format!("lb-sg-{uid}-{namespace}-{name}");
    if s.len() > MAX_NAME {
        let mut end = MAX_NAME;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// The upstream's description of the group.
pub fn sg_description(namespace: &str, name: &str, cluster: &str) -> String {
    format!("Security Group for {namespace}/{name} Service LoadBalancer in cluster {cluster}")
}

/// One wanted ingress rule; the ethertype follows the remote's family.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleSpec {
    /// Neutron's spelling: `tcp`, `udp`, `sctp`.
    pub protocol: String,
    pub port: u16,
    pub remote: IpNet,
}

impl RuleSpec {
    fn ethertype(&self) -> EtherType {
        match self.remote {
            IpNet::V4(_) => EtherType::IPv4,
            IpNet::V6(_) => EtherType::IPv6,
        }
    }

    fn create(&self, sg_id: &str) -> SecurityGroupRuleCreate {
        SecurityGroupRuleCreate {
            security_group_id: sg_id.to_owned(),
            direction: Direction::Ingress,
            ethertype: self.ethertype(),
            protocol: Some(self.protocol.clone()),
            port_range: Some((self.port, self.port)),
            remote: Remote::IpPrefix(self.remote.to_string()),
            description: None,
        }
    }

    /// What an observed rule says, if it is one kos-ccm could have made (ingress, one port, a
    /// prefix). A missing prefix is "anywhere" of the rule's family, as Neutron may store it.
    fn of(r: &SecurityGroupRule) -> Option<RuleSpec> {
        if r.direction != "ingress" || r.remote_group_id.is_some() {
            return None;
        }
        let (min, max) = (r.port_range_min?, r.port_range_max?);
        if min != max {
            return None;
        }
        let remote = match r.remote_ip_prefix.as_deref() {
            Some(p) => p.parse::<IpNet>().ok()?.trunc(),
            None if r.ethertype == "IPv6" => IpNet::V6(Default::default()),
            None => IpNet::V4(Default::default()),
        };
        let spec = RuleSpec {
            protocol: r.protocol.as_deref()?.to_ascii_lowercase(),
            port: min,
            remote,
        };
        // A rule whose ethertype disagrees with its prefix is not one of ours.
        let eth = if r.ethertype == "IPv6" {
            EtherType::IPv6
        } else {
            EtherType::IPv4
        };
        (spec.ethertype() == eth).then_some(spec)
    }
}

impl fmt::Display for RuleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} from {}", self.protocol, self.port, self.remote)
    }
}

/// Where the Service lets clients in from under OVN: its source ranges, or everyone of its family
/// (`/0` entries are kept: here they are a rule, not "no restriction").
pub fn client_ranges(svc: &Service, ipv6: bool) -> Vec<IpNet> {
    let spec_ranges = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .filter(|r| !r.is_empty());
    let items: Vec<String> = match spec_ranges {
        Some(r) => r,
        None => svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SOURCE_RANGES))
            .map(|v| v.split(',').map(|x| x.trim().to_owned()).collect())
            .unwrap_or_default(),
    };
    // The annotations were validated before the load balancer was made; a bad entry is skipped.
    let mut out: Vec<IpNet> = items
        .iter()
        .filter_map(|i| i.parse::<IpNet>().ok())
        .map(|n| n.trunc())
        .collect();
    if out.is_empty() {
        out.push(if ipv6 {
            IpNet::V6(Default::default())
        } else {
            IpNet::V4(Default::default())
        });
    }
    out
}

/// The wanted rules of the Service's group.
pub fn desired_rules(svc: &Service, member_cidr: IpNet, clients: &[IpNet]) -> BTreeSet<RuleSpec> {
    let mut want = BTreeSet::new();
    if let Some(hc) = health_check_node_port(svc) {
        // kubelet's health check is probed by the load balancer from the member subnet.
        want.insert(RuleSpec {
            protocol: "tcp".into(),
            port: hc,
            remote: member_cidr,
        });
    }
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_deref());
    for p in ports.unwrap_or_default() {
        // 0 or absent with allocateLoadBalancerNodePorts: false: nothing to open.
        let Some(port) = p
            .node_port
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
        else {
            continue;
        };
        let protocol = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
        for remote in clients {
            want.insert(RuleSpec {
                protocol: protocol.clone(),
                port,
                remote: *remote,
            });
        }
    }
    want
}

/// What to change in the group's rules.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuleDiff {
    pub create: Vec<RuleSpec>,
    /// (rule id, what it was, for the write log).
    pub delete: Vec<(String, String)>,
}

/// Creates what is missing and deletes extra ingress rules (duplicates included). Egress rules are
/// kept; with nothing wanted, nothing is deleted (upstream #2699).
pub fn diff_rules(want: &BTreeSet<RuleSpec>, have: &[SecurityGroupRule]) -> RuleDiff {
    let mut d = RuleDiff::default();
    let mut seen = HashSet::new();
    for r in have.iter().filter(|r| r.direction == "ingress") {
        match RuleSpec::of(r) {
            Some(s) if want.contains(&s) && seen.insert(s.clone()) => {}
            other => {
                let what = other.map_or_else(|| format!("ingress {}", r.id), |s| s.to_string());
                d.delete.push((r.id.clone(), what));
            }
        }
    }
    d.create = want
        .iter()
        .filter(|s| !seen.contains(*s))
        .cloned()
        .collect();
    if want.is_empty() {
        d.delete.clear();
    }
    d
}

/// One port's change: the full new group list and the full new tag list, where they change.
#[derive(Debug, PartialEq, Eq)]
pub struct PortChange {
    pub port_id: String,
    pub attach: bool,
    pub security_groups: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
}

fn is_member_port(p: &Port, members: &HashSet<&str>, member_subnet: &str) -> bool {
    // A port without port security cannot carry a group (Neutron refuses it).
    p.port_security_enabled != Some(false)
        && p.fixed_ips
            .iter()
            .any(|ip| ip.subnet_id == member_subnet && members.contains(ip.ip_address.as_str()))
}

/// The group onto member ports (tag first, so a delete always finds the port), off the others.
pub fn port_changes(
    ports: &[Port],
    sg_id: &str,
    members: &HashSet<&str>,
    member_subnet: &str,
) -> Vec<PortChange> {
    let mut out = Vec::new();
    for p in ports {
        let has_sg = p.security_groups.iter().any(|s| s == sg_id);
        let has_tag = p.tags.iter().any(|t| t == sg_id);
        if is_member_port(p, members, member_subnet) {
            if has_sg && has_tag {
                continue;
            }
            let mut tags = p.tags.clone();
            if !has_tag {
                tags.push(sg_id.to_owned());
            }
            let sgs = (!has_sg).then(|| {
                let mut s = p.security_groups.clone();
                s.push(sg_id.to_owned());
                s
            });
            out.push(PortChange {
                port_id: p.id.clone(),
                attach: true,
                security_groups: sgs,
                tags: (!has_tag).then_some(tags),
            });
        } else if has_sg || has_tag {
            out.push(detach(p, sg_id));
        }
    }
    out
}

fn detach(p: &Port, sg_id: &str) -> PortChange {
    let has_sg = p.security_groups.iter().any(|s| s == sg_id);
    let has_tag = p.tags.iter().any(|t| t == sg_id);
    PortChange {
        port_id: p.id.clone(),
        attach: false,
        security_groups: has_sg.then(|| {
            p.security_groups
                .iter()
                .filter(|s| *s != sg_id)
                .cloned()
                .collect()
        }),
        tags: has_tag.then(|| p.tags.iter().filter(|t| *t != sg_id).cloned().collect()),
    }
}

/// A failed step: what was being done, and the cloud's answer.
#[derive(Debug)]
pub struct SgFailure {
    pub action: String,
    pub source: CloudError,
}

impl fmt::Display for SgFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot {}: {}", self.action, self.source)
    }
}

fn fail(action: impl Into<String>) -> impl FnOnce(CloudError) -> SgFailure {
    let action = action.into();
    move |source| SgFailure { action, source }
}

/// One Service's group, as [`ensure`] needs it.
pub struct SgInput<'a> {
    pub svc: &'a Service,
    pub name: String,
    pub description: String,
    pub member_subnet_id: &'a str,
    pub ovn: bool,
    pub ipv6: bool,
    /// The members' addresses.
    pub members: Vec<&'a str>,
}

/// Makes the group, its rules and its port attachments match. Every change made is pushed onto
/// `writes`, also when a later step fails.
pub async fn ensure(
    session: &Session,
    input: &SgInput<'_>,
    writes: &mut Vec<String>,
) -> Result<(), SgFailure> {
    let net = session.network();
    let subnet = net
        .get_subnet(input.member_subnet_id)
        .await
        .map_err(fail("read the member subnet"))?
        .ok_or_else(|| SgFailure {
            action: "read the member subnet".into(),
            source: CloudError::Invalid {
                what: format!("subnet {}", input.member_subnet_id),
                detail: "not found".into(),
            },
        })?;
    let member_cidr: IpNet = subnet
        .cidr
        .parse::<IpNet>()
        .map_err(|_| SgFailure {
            action: "read the member subnet".into(),
            source: CloudError::Invalid {
                what: format!("subnet {}", subnet.id),
                detail: format!("CIDR {:?} does not parse", subnet.cidr),
            },
        })?
        .trunc();
    let clients = if input.ovn {
        client_ranges(input.svc, input.ipv6)
    } else {
        vec![member_cidr]
    };
    let want = desired_rules(input.svc, member_cidr, &clients);

    let sg = match find(session, &input.name).await? {
        Some(sg) => sg,
        None => {
            let sg = net
                .create_security_group(&SecurityGroupCreate {
                    name: input.name.clone(),
                    description: Some(input.description.clone()),
                    tags: Vec::new(),
                })
                .await
                .map_err(fail("create the security group"))?;
            writes.push(format!("create security group {}", sg.name));
            sg
        }
    };

    let diff = diff_rules(&want, &sg.security_group_rules);
    for r in &diff.create {
        match net.create_security_group_rule(&r.create(&sg.id)).await {
            Ok(_) => writes.push(format!("create security group rule {r}")),
            // Already there: a concurrent pass made it (upstream does the same).
            Err(e) if e.kind() == Some(kos_cloud::ApiErrorKind::Conflict) => {}
            Err(e) => return Err(fail(format!("create security group rule {r}"))(e)),
        }
    }
    for (id, what) in &diff.delete {
        net.delete_security_group_rule(id)
            .await
            .map_err(fail(format!("delete security group rule {what}")))?;
        writes.push(format!("delete security group rule {what}"));
    }

    let ports = net
        .list_ports(&PortFilter {
            network_id: Some(subnet.network_id.clone()),
            ..Default::default()
        })
        .await
        .map_err(fail("list the member network's ports"))?;
    let members: HashSet<&str> = input.members.iter().copied().collect();
    for c in port_changes(&ports, &sg.id, &members, &subnet.id) {
        apply_port_change(session, &c, &sg.id, writes).await?;
    }
    Ok(())
}

async fn find(session: &Session, name: &str) -> Result<Option<SecurityGroup>, SgFailure> {
    let mut found = session
        .network()
        .list_security_groups(&SecurityGroupFilter {
            name: Some(name.to_owned()),
            tags: TagQuery::default(),
        })
        .await
        .map_err(fail("list the security group"))?;
    // Neutron's name filter is exact; should a race have made two, the oldest id order wins and
    // the delete removes them all.
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found.into_iter().find(|g| g.name == name))
}

async fn apply_port_change(
    session: &Session,
    c: &PortChange,
    sg_id: &str,
    writes: &mut Vec<String>,
) -> Result<(), SgFailure> {
    let net = session.network();
    let tag = async {
        if let Some(tags) = &c.tags {
            if c.attach {
                net.add_tag(TaggedKind::Port, &c.port_id, sg_id).await?;
            } else {
                net.set_tags(TaggedKind::Port, &c.port_id, tags).await?;
            }
        }
        Ok::<_, CloudError>(())
    };
    let groups = async {
        if let Some(sgs) = &c.security_groups {
            let req = PortUpdate {
                security_groups: Some(sgs.clone()),
                ..Default::default()
            };
            net.update_port(&c.port_id, &req).await?;
        }
        Ok::<_, CloudError>(())
    };
    let what = |verb: &str| format!("{verb} port {}", c.port_id);
    if c.attach {
        // The tag first: a port carrying the group is always found again by its tag.
        tag.await.map_err(fail(what("tag")))?;
        if c.tags.is_some() {
            writes.push(format!(
                "tag port {} with security group {sg_id}",
                c.port_id
            ));
        }
        groups
            .await
            .map_err(fail(what("attach the security group to")))?;
        if c.security_groups.is_some() {
            writes.push(format!(
                "attach security group {sg_id} to port {}",
                c.port_id
            ));
        }
    } else {
        groups
            .await
            .map_err(fail(what("detach the security group from")))?;
        if c.security_groups.is_some() {
            writes.push(format!(
                "detach security group {sg_id} from port {}",
                c.port_id
            ));
        }
        tag.await.map_err(fail(what("untag")))?;
        if c.tags.is_some() {
            writes.push(format!(
                "untag port {} of security group {sg_id}",
                c.port_id
            ));
        }
    }
    Ok(())
}

/// Removes the group from every port tagged with it, then deletes it. Nothing to do when no group
/// has the name.
pub async fn ensure_deleted(
    session: &Session,
    name: &str,
    writes: &mut Vec<String>,
) -> Result<(), SgFailure> {
    let net = session.network();
    let groups = net
        .list_security_groups(&SecurityGroupFilter {
            name: Some(name.to_owned()),
            tags: TagQuery::default(),
        })
        .await
        .map_err(fail("list the security group"))?;
    for sg in groups.iter().filter(|g| g.name == name) {
        let ports = net
            .list_ports(&PortFilter {
                tags: TagQuery::any([sg.id.as_str()]),
                ..Default::default()
            })
            .await
            .map_err(fail("list the ports tagged with the security group"))?;
        for p in &ports {
            apply_port_change(session, &detach(p, &sg.id), &sg.id, writes).await?;
        }
        net.delete_security_group(&sg.id)
            .await
            .map_err(fail(format!("delete security group {}", sg.id)))?;
        writes.push(format!("delete security group {} ({})", sg.name, sg.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kos_cloud::model::network::FixedIp;

    fn svc(ports: &[(&str, i32)], hc: Option<i32>) -> Service {
        let ports: Vec<_> = ports.iter().map(|(p, n)| (*p, 80, *n)).collect();
        crate::lb::testutil::local_service(&ports, hc)
    }

    fn net(s: &str) -> IpNet {
        s.parse().expect("test CIDR")
    }

    fn rule(
        id: &str,
        dir: &str,
        proto: &str,
        port: u16,
        prefix: Option<&str>,
    ) -> SecurityGroupRule {
        SecurityGroupRule {
            id: id.into(),
            direction: dir.into(),
            ethertype: if prefix.is_some_and(|p| p.contains(':')) {
                "IPv6".into()
            } else {
                "IPv4".into()
            },
            protocol: Some(proto.into()),
            port_range_min: Some(port),
            port_range_max: Some(port),
            remote_ip_prefix: prefix.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn names_follow_the_upstream() {
        assert_eq!(sg_name("u-1", "ns", "web"), "lb-sg-u-1-ns-web");
        assert_eq!(sg_name("u", "n", &"x".repeat(300)).len(), 255);
    }

    #[test]
    fn rules_per_node_port_and_health_check_skipping_unallocated_ports() {
        let s = svc(&[("TCP", 30080), ("UDP", 30053), ("TCP", 0)], Some(32100));
        let cidr = net("10.0.0.0/24");
        let want = desired_rules(&s, cidr, &[net("203.0.113.0/24"), net("2001:db8::/64")]);
        let got: Vec<String> = want.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "tcp 30080 from 203.0.113.0/24",
                "tcp 30080 from 2001:db8::/64",
                "tcp 32100 from 10.0.0.0/24",
                "udp 30053 from 203.0.113.0/24",
                "udp 30053 from 2001:db8::/64",
            ]
        );
        assert!(
            want.iter().any(
                |r| r.remote.to_string() == "2001:db8::/64" && r.ethertype() == EtherType::IPv6
            )
        );
    }

    #[test]
    fn the_diff_keeps_matches_and_egress_drops_extras_and_duplicates() {
        let want: BTreeSet<RuleSpec> = [
            RuleSpec {
                protocol: "tcp".into(),
                port: 30080,
                remote: net("10.0.0.0/24"),
            },
            RuleSpec {
                protocol: "udp".into(),
                port: 30053,
                remote: net("0.0.0.0/0"),
            },
        ]
        .into();
        let have = [
            rule("keep", "ingress", "TCP", 30080, Some("10.0.0.0/24")),
            rule("dup", "ingress", "tcp", 30080, Some("10.0.0.0/24")),
            rule("old", "ingress", "tcp", 30081, Some("10.0.0.0/24")),
            rule("any", "ingress", "udp", 30053, None),
            rule("eg", "egress", "tcp", 1, None),
        ];
        let d = diff_rules(&want, &have);
        assert!(d.create.is_empty(), "{d:?}");
        let ids: Vec<&str> = d.delete.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["dup", "old"]);
        // Nothing wanted: nothing deleted, ever.
        assert_eq!(diff_rules(&BTreeSet::new(), &have), RuleDiff::default());
    }

    #[test]
    fn ports_get_the_group_next_to_theirs_and_leavers_lose_it() {
        let port = |id: &str, ip: &str, sgs: &[&str], tags: &[&str], psec: Option<bool>| Port {
            id: id.into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "sub".into(),
                ip_address: ip.into(),
            }],
            security_groups: sgs.iter().map(|s| (*s).into()).collect(),
            tags: tags.iter().map(|s| (*s).into()).collect(),
            port_security_enabled: psec,
            ..Default::default()
        };
        let ports = [
            port("new", "10.0.0.1", &["default"], &[], Some(true)),
            port("done", "10.0.0.2", &["default", "sg"], &["sg"], Some(true)),
            port("off", "10.0.0.3", &[], &[], Some(false)),
            port(
                "gone",
                "10.0.0.9",
                &["default", "sg"],
                &["x", "sg"],
                Some(true),
            ),
        ];
        let members: HashSet<&str> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].into();
        let c = port_changes(&ports, "sg", &members, "sub");
        assert_eq!(
            c,
            [
                PortChange {
                    port_id: "new".into(),
                    attach: true,
                    security_groups: Some(vec!["default".into(), "sg".into()]),
                    tags: Some(vec!["sg".into()]),
                },
                PortChange {
                    port_id: "gone".into(),
                    attach: false,
                    security_groups: Some(vec!["default".into()]),
                    tags: Some(vec!["x".into()]),
                },
            ]
        );
        // The member address on another subnet is not the member port.
        assert!(port_changes(&ports[..1], "sg", &members, "other").is_empty());
    }
}
