//! Neutron's security group semantics, as the ML2/OVS (iptables and native OVS firewall) and ML2/OVN
//! drivers enforce them:
//!
//! - a port with `port_security_enabled: false` is not filtered at all and may send from any address;
//! - otherwise a packet leaves a port only from one of its fixed IPs or an address inside one of its
//!   allowed address pairs (anti-spoofing), and only if an egress rule of one of its groups admits it;
//! - it enters a port only if an ingress rule of one of its groups admits it: same ethertype, protocol
//!   (`None`/`any`: every protocol; `icmp` on an IPv6 rule means ICMPv6), destination port in the range
//!   (`None`: every port), source inside `remote_ip_prefix`, or a fixed IP of a port carrying
//!   `remote_group_id`. Several rules together may admit a range none admits alone;
//! - replies to admitted traffic pass without a rule when the groups are stateful (conntrack); stateless
//!   groups need rules for the replies too.
//!
//! Where the drivers differ, the verdict is unknown and says why: ML2/OVS puts a member port's allowed
//! address pairs into its groups' remote-group sets (`neutron/db/securitygroups_rpc_base.py`,
//! `_select_ips_for_remote_group`; `neutron/api/rpc/handlers/securitygroups_rpc.py`), ML2/OVN matches
//! remote groups against the port group's address set, which ovn-northd builds from the ports'
//! `addresses` column (`northd/en-sync-sb.c`, `build_port_group_address_set`), where Neutron puts the
//! fixed IPs only (`ovn_client.py`, `_get_port_options`); a rule with protocol `0` is "every protocol" to
//! iptables but `ip.proto == 0` to OVN (`neutron/common/ovn/acl.py`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::model::{
    Direction, Family, Group, Port, PortSecurity, Protocol, Remote, Rule, Snapshot, proto,
};
use super::ranges::{self, Range};
use super::report::Finding;

/// Linux's default ephemeral port range (`net.ipv4.ip_local_port_range`): where the replies to a
/// connection go back to, which stateless rules must admit.
pub const EPHEMERAL: (u16, u16) = (32768, 60999);

/// A packet's protocol and destination ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    pub protocol: u8,
    /// Inclusive; `None` for protocols without ports.
    pub ports: Option<(u16, u16)>,
}

impl Traffic {
    #[must_use]
    pub fn tcp(port: u16) -> Traffic {
        Traffic {
            protocol: proto::TCP,
            ports: Some((port, port)),
        }
    }

    #[must_use]
    pub fn udp(port: u16) -> Traffic {
        Traffic {
            protocol: proto::UDP,
            ports: Some((port, port)),
        }
    }

    /// `protocol` to `port` (ignored by protocols without ports).
    #[must_use]
    pub fn to(protocol: u8, port: u16) -> Traffic {
        Traffic {
            protocol,
            ports: proto::has_ports(protocol).then_some((port, port)),
        }
    }

    /// A protocol without ports (IP-in-IP).
    #[must_use]
    pub fn protocol(protocol: u8) -> Traffic {
        Traffic {
            protocol,
            ports: None,
        }
    }

    /// The replies: same protocol, to the client's ephemeral ports.
    fn reply(self) -> Traffic {
        Traffic {
            protocol: self.protocol,
            ports: self.ports.map(|_| EPHEMERAL),
        }
    }

    /// `tcp/6443`, `tcp/32768-60999`, `ipip`.
    #[must_use]
    pub fn show(self) -> String {
        match self.ports {
            Some((lo, hi)) if lo != hi && proto::has_ports(self.protocol) => {
                format!("{}/{lo}-{hi}", proto::show(self.protocol, None))
            }
            Some((lo, _)) => proto::show(self.protocol, Some(lo)),
            None => proto::show(self.protocol, None),
        }
    }
}

/// Where a packet comes from (or, for egress, goes to): an address or a range, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub net: IpNet,
    /// `amphora port of LB kube_service_demo_default_web`, `clients`.
    pub what: String,
}

impl Peer {
    #[must_use]
    pub fn new(net: IpNet, what: impl Into<String>) -> Peer {
        Peer {
            net,
            what: what.into(),
        }
    }

    #[must_use]
    pub fn host(addr: IpAddr, what: impl Into<String>) -> Peer {
        Peer::new(ranges::host(addr), what)
    }

    fn is_host(&self) -> bool {
        self.net.prefix_len() == self.net.max_prefix_len()
    }

    /// `10.0.0.23 (amphora port of LB x)`.
    #[must_use]
    pub fn shown(&self) -> String {
        let addr = if self.is_host() {
            self.net.addr().to_string()
        } else {
            self.net.to_string()
        };
        if self.what.is_empty() {
            addr
        } else {
            format!("{addr} ({})", self.what)
        }
    }
}

/// Who is a member of each group: the fixed IPs of the ports carrying it, and their allowed address
/// pairs apart (only ML2/OVS counts those).
#[derive(Debug, Default)]
struct Members {
    fixed: HashSet<IpAddr>,
    pairs: BTreeSet<IpNet>,
}

/// A snapshot with each group's members worked out once.
pub struct Neutron<'a> {
    snap: &'a Snapshot,
    members: HashMap<&'a str, Members>,
}

/// What the rules of a port's groups say about some traffic.
enum Admission {
    /// These rules admit all of it.
    Rules(Vec<String>),
    /// Admitted only if allowed address pairs count as remote-group members (ML2/OVS, not OVN).
    PairsOnly(Vec<String>),
    /// Not admitted (or not all of it: `gap` is a part no rule admits); `unreadable` says which rules
    /// doctor could not evaluate.
    No {
        gap: Option<Range>,
        partial: bool,
        unreadable: Vec<String>,
    },
}

enum Matches {
    Yes,
    No,
    Unreadable(String),
}

impl<'a> Neutron<'a> {
    #[must_use]
    pub fn new(snap: &'a Snapshot) -> Neutron<'a> {
        let mut members: HashMap<&'a str, Members> = HashMap::new();
        for p in &snap.ports {
            let PortSecurity::Enabled { groups } = &p.security else {
                continue;
            };
            for g in groups {
                let m = members.entry(g.as_str()).or_default();
                m.fixed.extend(p.fixed_ips.iter().map(|f| f.address));
                m.pairs.extend(p.allowed_pairs.iter().copied());
            }
        }
        Neutron { snap, members }
    }

    #[must_use]
    pub fn snapshot(&self) -> &'a Snapshot {
        self.snap
    }

    /// Whether `src` reaching `to` with `traffic` passes `to`'s ingress filtering.
    #[must_use]
    pub fn ingress(&self, to: &Port, src: &Peer, traffic: Traffic) -> Finding {
        let groups = match &to.security {
            PortSecurity::Disabled => {
                return Finding::allowed(format!(
                    "port security is off on port {}: Neutron does not filter what reaches it",
                    to.label()
                ));
            }
            PortSecurity::Enabled { groups } if groups.is_empty() => {
                return Finding::blocked(format!(
                    "port {} has port security on and no security group: Neutron drops everything sent to it",
                    to.label()
                ));
            }
            PortSecurity::Enabled { groups } => groups,
        };
        let what = format!(
            "ingress rule on any security group of port {} ({})",
            to.label(),
            self.group_names(groups)
        );
        self.finding(
            self.admits(groups, Direction::Ingress, src.net, traffic),
            &what,
            &format!("{} from {}", traffic.show(), src.shown()),
            &format!("into port {}", to.label()),
        )
    }

    /// Whether `from` may send `traffic` from `src` to `dst`: anti-spoofing, then its egress rules.
    #[must_use]
    pub fn egress(&self, from: &Port, src: IpNet, dst: &Peer, traffic: Traffic) -> Finding {
        let groups = match &from.security {
            PortSecurity::Disabled => {
                return Finding::allowed(format!(
                    "port security is off on port {}: no egress filtering, no anti-spoofing",
                    from.label()
                ));
            }
            PortSecurity::Enabled { groups } => groups,
        };
        let spoofing = self.anti_spoofing(from, src);
        if groups.is_empty() {
            return spoofing.then(Finding::blocked(format!(
                "port {} has port security on and no security group: Neutron drops everything it sends",
                from.label()
            )));
        }
        let what = format!(
            "egress rule on any security group of port {} ({})",
            from.label(),
            self.group_names(groups)
        );
        spoofing.then(self.finding(
            self.admits(groups, Direction::Egress, dst.net, traffic),
            &what,
            &format!("{} to {}", traffic.show(), dst.shown()),
            &format!("out of port {}", from.label()),
        ))
    }

    /// Neutron's anti-spoofing on `from`: it sends only from its fixed IPs and allowed address pairs.
    #[must_use]
    pub fn anti_spoofing(&self, from: &Port, src: IpNet) -> Finding {
        if from.security == PortSecurity::Disabled {
            return Finding::allowed(format!(
                "port security is off on port {}: no anti-spoofing",
                from.label()
            ));
        }
        let mut own: Vec<IpNet> = from
            .fixed_ips
            .iter()
            .map(|f| ranges::host(f.address))
            .collect();
        if ranges::uncovered(src, &own).is_none() {
            return Finding::all([]);
        }
        own.extend(from.allowed_pairs.iter().copied());
        match ranges::uncovered(src, &own) {
            None => {
                let pairs: Vec<String> = from
                    .allowed_pairs
                    .iter()
                    .filter(|p| p.contains(&src.network()) || src.contains(*p))
                    .map(ToString::to_string)
                    .collect();
                Finding::allowed(format!(
                    "allowed address pair(s) {} of port {} let it send from {src}",
                    pairs.join(", "),
                    from.label()
                ))
            }
            Some(gap) => Finding::blocked(format!(
                "port {} may not send from {gap}: it is neither a fixed IP nor in an allowed address pair \
                 of the port, and Neutron drops it (anti-spoofing)",
                from.label()
            )),
        }
    }

    /// A connection from `src` (leaving `from`, when it is a port here) to `dst` on `to`: egress,
    /// ingress, and the replies when a group on the way is stateless.
    #[must_use]
    pub fn path(
        &self,
        from: Option<&Port>,
        src: &Peer,
        to: &Port,
        dst: IpAddr,
        traffic: Traffic,
    ) -> Finding {
        let dst_peer = Peer::host(dst, format!("port {}", to.label()));
        let out = from.map_or_else(
            || Finding::all([]),
            |p| self.egress(p, src.net, &dst_peer, traffic),
        );
        out.then(self.ingress(to, src, traffic))
            .then(self.replies(from, src, to, dst, traffic))
    }

    /// Replies need rules only on ports whose groups are stateless.
    fn replies(
        &self,
        from: Option<&Port>,
        src: &Peer,
        to: &Port,
        dst: IpAddr,
        traffic: Traffic,
    ) -> Finding {
        let reply = traffic.reply();
        let mut steps = Vec::new();
        if self.stateless(to) {
            steps.push(self.egress(to, ranges::host(dst), src, reply));
        }
        if let Some(from) = from
            && self.stateless(from)
        {
            let back = Peer::host(dst, format!("reply from port {}", to.label()));
            steps.push(self.ingress(from, &back, reply));
        }
        Finding::all(steps)
    }

    /// A port filtered by a stateless group (Neutron refuses mixing stateful and stateless groups on
    /// one port).
    fn stateless(&self, p: &Port) -> bool {
        match &p.security {
            PortSecurity::Disabled => false,
            PortSecurity::Enabled { groups } => groups
                .iter()
                .filter_map(|g| self.snap.group(g))
                .any(|g| !g.stateful),
        }
    }

    fn group_names(&self, groups: &[String]) -> String {
        groups
            .iter()
            .map(|g| self.snap.group(g).map_or(g.as_str(), Group::label))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `where_` says which port an admitting rule applies to (the refusals name it already).
    fn finding(&self, a: Admission, what: &str, traffic: &str, where_: &str) -> Finding {
        match a {
            Admission::Rules(rules) => {
                Finding::allowed(format!("{} admits {traffic} {where_}", rules.join(" + ")))
            }
            Admission::PairsOnly(rules) => Finding::unknown(format!(
                "{traffic} is admitted by {} only through members' allowed address pairs: ML2/OVS counts \
                 them as remote-group members, ML2/OVN does not",
                rules.join(" + ")
            )),
            Admission::No {
                gap,
                partial,
                unreadable,
            } if unreadable.is_empty() => {
                let mut why = format!("no {what} admits {traffic}");
                if let (true, Some(gap)) = (partial, gap) {
                    why.push_str(&format!(" (rules admit part of it; not {gap})"));
                }
                Finding::blocked(why)
            }
            Admission::No { unreadable, .. } => Finding::unknown(format!(
                "no readable {what} admits {traffic}; cannot evaluate: {}",
                unreadable.join("; ")
            )),
        }
    }

    /// What the `direction` rules of `groups` say about `traffic` from (ingress) or to (egress) `peer`.
    fn admits(
        &self,
        groups: &[String],
        direction: Direction,
        peer: IpNet,
        traffic: Traffic,
    ) -> Admission {
        let family = Family::of(peer.addr());
        let host = peer.prefix_len() == peer.max_prefix_len();
        let mut unreadable = Vec::new();
        let mut plain: Vec<(IpNet, String)> = Vec::new();
        let mut pairs: Vec<(IpNet, String)> = Vec::new();
        for gid in groups {
            let Some(g) = self.snap.group(gid) else {
                unreadable.push(format!(
                    "security group {gid} is not visible to this project"
                ));
                continue;
            };
            for r in &g.rules {
                if r.direction != direction || r.family != family || !ports_match(r, traffic) {
                    continue;
                }
                let desc = describe(self.snap, g, r);
                match protocol_matches(r, traffic) {
                    Matches::No => continue,
                    Matches::Unreadable(why) => {
                        unreadable.push(format!("{desc}: {why}"));
                        continue;
                    }
                    Matches::Yes => {}
                }
                match &r.remote {
                    Remote::Any => return Admission::Rules(vec![desc]),
                    Remote::Prefix(n) if ranges::uncovered(peer, &[*n]).is_none() => {
                        return Admission::Rules(vec![desc]);
                    }
                    Remote::Prefix(n) => plain.push((*n, desc)),
                    Remote::Group(other) => {
                        let Some(m) = self.members.get(other.as_str()) else {
                            continue;
                        };
                        if host && m.fixed.contains(&peer.addr()) {
                            return Admission::Rules(vec![desc]);
                        }
                        if !host {
                            plain.extend(m.fixed.iter().map(|a| (ranges::host(*a), desc.clone())));
                        }
                        pairs.extend(m.pairs.iter().map(|n| (*n, desc.clone())));
                    }
                    Remote::AddressGroup(id) => {
                        unreadable.push(format!("{desc}: its address group {id} is not read"));
                    }
                    Remote::Unreadable(s) => {
                        unreadable.push(format!("{desc}: remote_ip_prefix {s:?} is not a CIDR"));
                    }
                }
            }
        }
        let used = |nets: &[(IpNet, String)]| -> Vec<String> {
            let mut d: Vec<String> = nets
                .iter()
                .filter(|(n, _)| n.contains(&peer.network()) || peer.contains(n))
                .map(|(_, d)| d.clone())
                .collect();
            d.dedup();
            d
        };
        let plain_nets: Vec<IpNet> = plain.iter().map(|(n, _)| *n).collect();
        if ranges::uncovered(peer, &plain_nets).is_none() {
            return Admission::Rules(used(&plain));
        }
        let mut all = plain.clone();
        all.extend(pairs.iter().cloned());
        let all_nets: Vec<IpNet> = all.iter().map(|(n, _)| *n).collect();
        match ranges::uncovered(peer, &all_nets) {
            None => Admission::PairsOnly(used(&all)),
            Some(gap) => Admission::No {
                partial: gap != Range::from(peer),
                gap: Some(gap),
                unreadable,
            },
        }
    }
}

fn protocol_matches(r: &Rule, t: Traffic) -> Matches {
    match &r.protocol {
        Protocol::Any => Matches::Yes,
        Protocol::Number(0) => Matches::Unreadable(
            "protocol 0 means every protocol to ML2/OVS but only IP protocol 0 to ML2/OVN".into(),
        ),
        Protocol::Number(n) => {
            // Neutron stores `icmp` on an IPv6 rule as ICMPv6.
            let n = if r.family == Family::V6 && *n == proto::ICMP {
                proto::ICMPV6
            } else {
                *n
            };
            if n == t.protocol {
                Matches::Yes
            } else {
                Matches::No
            }
        }
        Protocol::Unrecognised(p) => {
            Matches::Unreadable(format!("protocol {p:?} is not one Neutron knows"))
        }
    }
}

fn ports_match(r: &Rule, t: Traffic) -> bool {
    if !proto::has_ports(t.protocol) {
        return true;
    }
    match (r.ports, t.ports) {
        (Some((lo, hi)), Some((a, b))) => lo <= a && b <= hi,
        _ => true,
    }
}

/// `kos-demo-sg-node rule 5f3a… (ingress tcp/30000-32767 from group kos-demo-sg-node)`.
fn describe(snap: &Snapshot, g: &Group, r: &Rule) -> String {
    let protocol = match &r.protocol {
        Protocol::Any => "any protocol".to_owned(),
        Protocol::Number(n) => proto::show(*n, None),
        Protocol::Unrecognised(p) => format!("protocol {p}"),
    };
    let ports = match r.ports {
        Some((lo, hi)) if lo == hi => format!("/{lo}"),
        Some((lo, hi)) => format!("/{lo}-{hi}"),
        None => String::new(),
    };
    let dir = match r.direction {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    };
    let fromto = match r.direction {
        Direction::Ingress => "from",
        Direction::Egress => "to",
    };
    let remote = match &r.remote {
        Remote::Any => "anywhere".to_owned(),
        Remote::Prefix(n) => n.to_string(),
        Remote::Group(id) => format!("group {}", snap.group(id).map_or(id.as_str(), Group::label)),
        Remote::AddressGroup(id) => format!("address group {id}"),
        Remote::Unreadable(s) => s.clone(),
    };
    format!(
        "security group {} rule {} ({dir} {protocol}{ports} {fromto} {remote})",
        g.label(),
        r.id
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::{Direction, Family, Remote};
    use crate::doctor::report::Verdict;
    use crate::doctor::testutil::*;

    fn verdict_of(snap: &Snapshot, to: &str, src: &str, t: Traffic) -> (Verdict, Vec<String>) {
        let n = Neutron::new(snap);
        let port = snap.port(to).expect("port");
        let f = n.ingress(port, &Peer::new(net(src), "test"), t);
        (f.verdict, f.evidence)
    }

    fn is_unknown(v: &Verdict) -> bool {
        matches!(v, Verdict::Unknown { .. })
    }

    /// One group `g` with `rules` on port `dst` (10.0.0.5).
    fn one_group(rules: Vec<Rule>) -> Snapshot {
        snapshot(
            vec![port("dst", "10.0.0.5", &["g"])],
            vec![group("g", rules)],
        )
    }

    #[test]
    fn ethertype_must_match_the_source_family() {
        let mut v6 = ingress("r6", Some("tcp"), None, Remote::Any);
        v6.family = Family::V6;
        let snap = one_group(vec![v6]);
        assert_eq!(
            verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(22)).0,
            Verdict::Blocked
        );
        assert_eq!(
            verdict_of(&snap, "dst", "2001:db8::9/128", Traffic::tcp(22)).0,
            Verdict::Allowed
        );
    }

    #[test]
    fn protocol_none_is_any_and_names_and_numbers_are_the_same_protocol() {
        let any = one_group(vec![ingress("r", None, None, Remote::Any)]);
        for t in [
            Traffic::tcp(1),
            Traffic::udp(8472),
            Traffic::protocol(proto::IPIP),
        ] {
            assert_eq!(
                verdict_of(&any, "dst", "10.0.0.9/32", t).0,
                Verdict::Allowed,
                "{t:?}"
            );
        }
        for p in ["4", "ipip", "IPIP"] {
            let snap = one_group(vec![ingress("r", Some(p), None, Remote::Any)]);
            assert_eq!(
                verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::protocol(proto::IPIP)).0,
                Verdict::Allowed,
                "{p}"
            );
            assert_eq!(
                verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(179)).0,
                Verdict::Blocked,
                "{p}"
            );
        }
        let udp = one_group(vec![ingress("r", Some("udp"), None, Remote::Any)]);
        assert_eq!(
            verdict_of(&udp, "dst", "10.0.0.9/32", Traffic::udp(8472)).0,
            Verdict::Allowed
        );
        assert_eq!(
            verdict_of(&udp, "dst", "10.0.0.9/32", Traffic::tcp(8472)).0,
            Verdict::Blocked
        );
        let any_word = one_group(vec![ingress("r", Some("any"), None, Remote::Any)]);
        assert_eq!(
            verdict_of(&any_word, "dst", "10.0.0.9/32", Traffic::tcp(1)).0,
            Verdict::Allowed
        );
    }

    #[test]
    fn icmp_on_an_ipv6_rule_is_icmpv6_and_protocol_zero_or_a_stranger_is_unknown() {
        let mut r = ingress("r", Some("icmp"), None, Remote::Any);
        r.family = Family::V6;
        let snap = one_group(vec![r]);
        assert_eq!(
            verdict_of(
                &snap,
                "dst",
                "2001:db8::9/128",
                Traffic::protocol(proto::ICMPV6)
            )
            .0,
            Verdict::Allowed
        );
        let zero = one_group(vec![ingress("r", Some("0"), None, Remote::Any)]);
        assert!(is_unknown(
            &verdict_of(&zero, "dst", "10.0.0.9/32", Traffic::tcp(80)).0
        ));
        let odd = one_group(vec![ingress(
            "r",
            Some("carrier-pigeon"),
            None,
            Remote::Any,
        )]);
        assert!(is_unknown(
            &verdict_of(&odd, "dst", "10.0.0.9/32", Traffic::tcp(80)).0
        ));
    }

    #[test]
    fn port_ranges_are_inclusive_and_none_is_every_port() {
        let snap = one_group(vec![ingress(
            "r",
            Some("tcp"),
            Some((30000, 32767)),
            Remote::Any,
        )]);
        for (port, want) in [
            (29999, Verdict::Blocked),
            (30000, Verdict::Allowed),
            (32767, Verdict::Allowed),
            (32768, Verdict::Blocked),
        ] {
            assert_eq!(
                verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(port)).0,
                want,
                "{port}"
            );
        }
        let all = one_group(vec![ingress("r", Some("tcp"), None, Remote::Any)]);
        assert_eq!(
            verdict_of(&all, "dst", "10.0.0.9/32", Traffic::tcp(65535)).0,
            Verdict::Allowed
        );
        // A range of traffic needs a rule covering all of it.
        let one = one_group(vec![ingress(
            "r",
            Some("tcp"),
            Some((2379, 2379)),
            Remote::Any,
        )]);
        let etcd = Traffic {
            protocol: proto::TCP,
            ports: Some((2379, 2380)),
        };
        assert_eq!(
            verdict_of(&one, "dst", "10.0.0.9/32", etcd).0,
            Verdict::Blocked
        );
    }

    #[test]
    fn remote_prefixes_admit_what_they_contain_alone_or_together() {
        let snap = one_group(vec![
            ingress(
                "a",
                Some("tcp"),
                Some((6443, 6443)),
                prefix("198.51.100.0/25"),
            ),
            ingress(
                "b",
                Some("tcp"),
                Some((6443, 6443)),
                prefix("198.51.100.128/25"),
            ),
        ]);
        let (v, ev) = verdict_of(&snap, "dst", "198.51.100.0/24", Traffic::tcp(6443));
        assert_eq!(v, Verdict::Allowed, "{ev:?}");
        assert!(
            ev[0].contains("rule a") && ev[0].contains("rule b"),
            "{ev:?}"
        );
        let (v, ev) = verdict_of(&snap, "dst", "198.51.0.0/16", Traffic::tcp(6443));
        assert_eq!(v, Verdict::Blocked);
        assert!(
            ev[0].contains("rules admit part of it; not 198.51.0.0-198.51.99.255"),
            "{ev:?}"
        );
        let (v, _) = verdict_of(&snap, "dst", "203.0.113.7/32", Traffic::tcp(6443));
        assert_eq!(v, Verdict::Blocked);
        let mut v6 = ingress("c", Some("tcp"), None, prefix("2001:db8::/32"));
        v6.family = Family::V6;
        let snap = one_group(vec![v6]);
        assert_eq!(
            verdict_of(&snap, "dst", "2001:db8:1::/48", Traffic::tcp(1)).0,
            Verdict::Allowed
        );
        assert_eq!(
            verdict_of(&snap, "dst", "2001:db9::1/128", Traffic::tcp(1)).0,
            Verdict::Blocked
        );
    }

    #[test]
    fn remote_group_admits_fixed_ips_of_its_members_and_pairs_only_maybe() {
        let snap = snapshot(
            vec![
                port("dst", "10.0.0.5", &["g"]),
                port_with_pairs("member", "10.0.0.6", &["g"], &["10.244.0.0/16"]),
                port("stranger", "10.0.0.7", &["other"]),
            ],
            vec![
                group(
                    "g",
                    vec![ingress(
                        "r",
                        Some("tcp"),
                        Some((10250, 10250)),
                        Remote::Group("g".into()),
                    )],
                ),
                group("other", vec![egress_all("e")]),
            ],
        );
        let (v, ev) = verdict_of(&snap, "dst", "10.0.0.6/32", Traffic::tcp(10250));
        assert_eq!(v, Verdict::Allowed);
        assert!(ev[0].contains("from group g"), "{ev:?}");
        let (v, ev) = verdict_of(&snap, "dst", "10.0.0.7/32", Traffic::tcp(10250));
        assert_eq!(v, Verdict::Blocked);
        assert!(ev[0].starts_with("no ingress rule on any security group of port dst (g) admits tcp/10250 from 10.0.0.7"), "{ev:?}");
        // An address inside a member's allowed address pair: ML2/OVS admits it, ML2/OVN does not.
        let (v, ev) = verdict_of(&snap, "dst", "10.244.3.4/32", Traffic::tcp(10250));
        assert!(is_unknown(&v), "{v:?}");
        assert!(ev[0].contains("ML2/OVN does not"), "{ev:?}");
    }

    #[test]
    fn port_security_off_means_no_filtering_and_no_anti_spoofing() {
        let snap = snapshot(
            vec![
                open_port("open", "10.0.0.5"),
                port("dst", "10.0.0.6", &["g"]),
            ],
            vec![group(
                "g",
                vec![ingress("r", None, None, prefix("10.244.0.0/16"))],
            )],
        );
        let n = Neutron::new(&snap);
        let open = snap.port("open").expect("port");
        let f = n.ingress(
            open,
            &Peer::new(net("0.0.0.0/0"), "anyone"),
            Traffic::tcp(22),
        );
        assert_eq!(f.verdict, Verdict::Allowed);
        // It may send from pod addresses it does not hold.
        let dst = snap.port("dst").expect("port");
        let f = n.path(
            Some(open),
            &Peer::new(net("10.244.1.0/24"), "pods"),
            dst,
            ip("10.0.0.6"),
            Traffic::tcp(80),
        );
        assert_eq!(f.verdict, Verdict::Allowed, "{:?}", f.evidence);
    }

    #[test]
    fn anti_spoofing_drops_sources_outside_fixed_ips_and_allowed_address_pairs() {
        let snap = snapshot(
            vec![
                port("bare", "10.0.0.5", &["g"]),
                port_with_pairs("paired", "10.0.0.6", &["g"], &["10.244.0.0/16"]),
            ],
            vec![group("g", vec![egress_all("e")])],
        );
        let n = Neutron::new(&snap);
        let to = Peer::host(ip("10.0.0.9"), "somewhere");
        let bare = snap.port("bare").expect("port");
        let f = n.egress(bare, net("10.244.1.0/24"), &to, Traffic::tcp(80));
        assert_eq!(f.verdict, Verdict::Blocked);
        assert!(f.evidence[0].contains("anti-spoofing"), "{:?}", f.evidence);
        assert_eq!(
            n.egress(bare, net("10.0.0.5/32"), &to, Traffic::tcp(80))
                .verdict,
            Verdict::Allowed
        );
        let paired = snap.port("paired").expect("port");
        let f = n.egress(paired, net("10.244.1.0/24"), &to, Traffic::tcp(80));
        assert_eq!(f.verdict, Verdict::Allowed, "{:?}", f.evidence);
        assert!(
            f.evidence[0].contains("allowed address pair(s) 10.244.0.0/16"),
            "{:?}",
            f.evidence
        );
        assert_eq!(
            n.egress(paired, net("10.245.0.0/24"), &to, Traffic::tcp(80))
                .verdict,
            Verdict::Blocked
        );
    }

    #[test]
    fn egress_needs_a_rule_on_the_source_port_default_egress_allows_all() {
        let admit = ingress("in", None, None, Remote::Any);
        let snap = snapshot(
            vec![
                port("src", "10.0.0.5", &["default"]),
                port("muted", "10.0.0.7", &["noegress"]),
                port("dst", "10.0.0.6", &["g"]),
            ],
            vec![
                group("default", vec![egress_all("e4")]),
                group("noegress", vec![]),
                group("g", vec![admit]),
            ],
        );
        let n = Neutron::new(&snap);
        let dst = snap.port("dst").expect("port");
        let src = snap.port("src").expect("port");
        let f = n.path(
            Some(src),
            &Peer::host(ip("10.0.0.5"), "src"),
            dst,
            ip("10.0.0.6"),
            Traffic::tcp(443),
        );
        assert_eq!(f.verdict, Verdict::Allowed, "{:?}", f.evidence);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("rule e4 (egress any protocol to anywhere)")),
            "{:?}",
            f.evidence
        );
        let muted = snap.port("muted").expect("port");
        let f = n.path(
            Some(muted),
            &Peer::host(ip("10.0.0.7"), "muted"),
            dst,
            ip("10.0.0.6"),
            Traffic::tcp(443),
        );
        assert_eq!(f.verdict, Verdict::Blocked);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.starts_with("no egress rule on any security group of port muted")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn replies_pass_stateful_groups_but_stateless_ones_need_rules_for_them() {
        let admit = ingress("in", Some("tcp"), Some((6443, 6443)), Remote::Any);
        let mut snap = snapshot(
            vec![
                port("src", "10.0.0.5", &["client"]),
                port("dst", "10.0.0.6", &["server"]),
            ],
            vec![
                group("client", vec![egress_all("e")]),
                group("server", vec![admit.clone()]),
            ],
        );
        let t = Traffic::tcp(6443);
        let check = |snap: &Snapshot| {
            let n = Neutron::new(snap);
            n.path(
                snap.port("src"),
                &Peer::host(ip("10.0.0.5"), "src"),
                snap.port("dst").expect("dst"),
                ip("10.0.0.6"),
                t,
            )
        };
        assert_eq!(
            check(&snap).verdict,
            Verdict::Allowed,
            "stateful: no egress rule needed on the server"
        );
        snap.groups[1].stateful = false;
        let f = check(&snap);
        assert_eq!(
            f.verdict,
            Verdict::Blocked,
            "stateless: the reply needs an egress rule"
        );
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("tcp/32768-60999 to 10.0.0.5")),
            "{:?}",
            f.evidence
        );
        snap.groups[1].rules.push(rule(
            "out",
            Direction::Egress,
            Some("tcp"),
            None,
            Remote::Any,
        ));
        assert_eq!(check(&snap).verdict, Verdict::Allowed);
    }

    #[test]
    fn unreadable_and_invisible_rules_make_a_flow_unknown_never_allowed() {
        let snap = one_group(vec![ingress(
            "r",
            Some("tcp"),
            None,
            Remote::AddressGroup("ag".into()),
        )]);
        assert!(is_unknown(
            &verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(80)).0
        ));
        let snap = snapshot(vec![port("dst", "10.0.0.5", &["hidden"])], vec![]);
        let (v, ev) = verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(80));
        assert!(is_unknown(&v));
        assert!(ev[0].contains("hidden is not visible"), "{ev:?}");
        let snap = snapshot(vec![port("dst", "10.0.0.5", &[])], vec![]);
        assert_eq!(
            verdict_of(&snap, "dst", "10.0.0.9/32", Traffic::tcp(80)).0,
            Verdict::Blocked
        );
    }
}
