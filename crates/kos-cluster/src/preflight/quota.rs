//! Quota math: what this cluster adds, against each quota's limit and current usage.
//!
//! "Adds" is what the spec needs minus what already exists for this cluster (found by its tag, or by name for
//! server groups), so re-running preflight on a half-built cluster does not count its resources twice: they
//! are in the cloud's usage already.

use std::collections::BTreeSet;
use std::fmt;

use kos_cloud::CloudError;
use kos_cloud::model::QuotaUsage;
use kos_cloud::model::compute::Flavor;
use miette::SourceSpan;

use super::facts::Facts;
use super::resolve::{Site, sites};
use super::{Cx, plural, some_of};
use crate::diagnostics::{Code, Diagnostic};
use crate::names::{cluster_tag, resource_name};
use crate::resolved::Resolved;
use crate::spec::{ClusterSpec, EndpointKind, NetworkSource, ServerGroupPolicy};

/// A quota kos checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Instances,
    Cores,
    /// MiB.
    Ram,
    ServerGroups,
    /// Per server group, not a total: "need" is the largest group.
    ServerGroupMembers,
    Volumes,
    /// Volume GB.
    Gigabytes,
    Networks,
    Subnets,
    Routers,
    Ports,
    FloatingIps,
    SecurityGroups,
    SecurityGroupRules,
    LoadBalancers,
}

impl Resource {
    /// The name in the table.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::Cores => "cores",
            Self::Ram => "RAM (MiB)",
            Self::ServerGroups => "server groups",
            Self::ServerGroupMembers => "server group members (per group)",
            Self::Volumes => "volumes",
            Self::Gigabytes => "volume gigabytes",
            Self::Networks => "networks",
            Self::Subnets => "subnets",
            Self::Routers => "routers",
            Self::Ports => "ports",
            Self::FloatingIps => "floating IPs",
            Self::SecurityGroups => "security groups",
            Self::SecurityGroupRules => "security group rules",
            Self::LoadBalancers => "load balancers",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One quota line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaRow {
    pub resource: Resource,
    /// What this run would add (what the spec needs minus what this cluster already has).
    pub need: u64,
    /// Used and reserved now, this cluster's existing resources included.
    pub in_use: u64,
    /// `None`: unlimited.
    pub limit: Option<u64>,
}

impl QuotaRow {
    /// How much the limit is exceeded by once `need` is added (0 when it fits).
    #[must_use]
    pub fn short(&self) -> u64 {
        self.limit
            .map_or(0, |l| (self.in_use + self.need).saturating_sub(l))
    }
}

/// Quota lines; `Display` prints them as a table: resource | need | in use | limit | short.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaTable {
    pub rows: Vec<QuotaRow>,
}

impl QuotaTable {
    /// Only the lines that are short.
    #[must_use]
    pub fn short(&self) -> QuotaTable {
        QuotaTable {
            rows: self
                .rows
                .iter()
                .filter(|r| r.short() > 0)
                .cloned()
                .collect(),
        }
    }

    /// The line for `r`, if it was checked.
    #[must_use]
    pub fn row(&self, r: Resource) -> Option<&QuotaRow> {
        self.rows.iter().find(|x| x.resource == r)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for QuotaTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = ["resource", "need", "in use", "limit", "short"];
        let cells: Vec<[String; 5]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.resource.to_string(),
                    r.need.to_string(),
                    r.in_use.to_string(),
                    r.limit.map_or("unlimited".into(), |l| l.to_string()),
                    r.short().to_string(),
                ]
            })
            .collect();
        let width = |i: usize| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        };
        let w: Vec<usize> = (0..5).map(width).collect();
        let line = |f: &mut fmt::Formatter<'_>, c: [&str; 5]| {
            writeln!(
                f,
                "{:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} | {:>w4$}",
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4]
            )
        };
        line(f, head)?;
        for c in &cells {
            line(f, [&c[0], &c[1], &c[2], &c[3], &c[4]])?;
        }
        Ok(())
    }
}

/// kos's security groups: one for control planes, one for workers.
const SECURITY_GROUPS: u64 = 2;

/// Rules in kos's groups: per group the two egress rules Neutron adds itself, all traffic from either group,
/// and ICMP; the API port from each allowed CIDR (or from anywhere), and with allowed CIDRs from the
/// router's gateway (nodes through the floating IP); SSH from each allowed CIDR, on both.
fn security_group_rules(spec: &ClusterSpec) -> u64 {
    let allowed = &spec.api_endpoint.allowed_cidrs;
    let api =
        allowed.len().max(1) as u64 + u64::from(!allowed.is_empty() && spec.api_endpoint.public);
    SECURITY_GROUPS * (2 + 2 + 1)
        + api
        + SECURITY_GROUPS * spec.network.ssh_allowed_cidrs.len() as u64
}

/// What the whole cluster uses, per resource (cores and RAM count only the flavors that were found).
fn planned(
    spec: &ClusterSpec,
    sites: &[Site<'_>],
    flavors: &[Option<&Flavor>],
) -> Vec<(Resource, u64)> {
    let lb = matches!(
        spec.api_endpoint.kind.value,
        EndpointKind::LoadBalancer { .. }
    );
    let create = matches!(spec.network.source, NetworkSource::Create(_));
    let nodes = u64::from(spec.node_count());
    let sum = |f: &dyn Fn(&Site<'_>, Option<&Flavor>) -> u64| -> u64 {
        sites.iter().zip(flavors).map(|(s, fl)| f(s, *fl)).sum()
    };
    let count = |s: &Site<'_>| u64::from(s.count.value);
    // A pool scaled to zero keeps its server group (the graph makes one per pool with a policy), so
    // it counts against the quota like any other.
    let groups: Vec<u64> = sites
        .iter()
        .filter(|s| policy(spec, s) != ServerGroupPolicy::None)
        .map(count)
        .collect();
    let rows = vec![
        (Resource::Instances, nodes),
        (
            Resource::Cores,
            sum(&|s, f| count(s) * f.map_or(0, |f| u64::from(f.vcpus))),
        ),
        (
            Resource::Ram,
            sum(&|s, f| count(s) * f.map_or(0, |f| f.ram)),
        ),
        (Resource::ServerGroups, groups.len() as u64),
        (
            Resource::ServerGroupMembers,
            groups.iter().copied().max().unwrap_or(0),
        ),
        (
            Resource::Volumes,
            sum(&|s, _| {
                if s.machine.boot_volume.is_some() {
                    count(s)
                } else {
                    0
                }
            }),
        ),
        (
            Resource::Gigabytes,
            sum(&|s, _| {
                s.machine
                    .boot_volume
                    .as_ref()
                    .map_or(0, |b| count(s) * u64::from(b.size_gb))
            }),
        ),
        (Resource::Networks, u64::from(create)),
        (Resource::Subnets, u64::from(create)),
        (Resource::Routers, u64::from(create)),
        // One per node, the load balancer's VIP, and on a new network its router interface and DHCP port.
        (
            Resource::Ports,
            nodes + u64::from(lb) + 2 * u64::from(create),
        ),
        (Resource::FloatingIps, u64::from(spec.api_endpoint.public)),
        (Resource::SecurityGroups, SECURITY_GROUPS),
        (Resource::SecurityGroupRules, security_group_rules(spec)),
        (Resource::LoadBalancers, u64::from(lb)),
    ];
    rows.into_iter().filter(|(_, n)| *n > 0).collect()
}

fn policy(spec: &ClusterSpec, s: &Site<'_>) -> ServerGroupPolicy {
    match s.pool {
        None => spec.control_plane.server_group_policy,
        Some(name) => spec
            .node_pools
            .iter()
            .find(|p| &p.name.value == name)
            .map_or(ServerGroupPolicy::None, |p| p.server_group_policy),
    }
}

/// What this cluster already has, per resource (0 when the list failed: then usage is all we know).
fn existing(spec: &ClusterSpec, facts: &Facts, r: Resource) -> u64 {
    let tag = cluster_tag(&spec.name);
    let servers = facts.servers.as_deref().unwrap_or_default();
    let volumes = facts
        .volumes
        .as_ref()
        .and_then(|v| v.as_deref().ok())
        .unwrap_or_default();
    let networks = facts.networks.as_deref().unwrap_or_default();
    let ours_net: BTreeSet<&str> = networks
        .iter()
        .filter(|n| n.tags.contains(&tag))
        .map(|n| n.id.as_str())
        .collect();
    let lbs = facts
        .load_balancers
        .as_ref()
        .and_then(|v| v.as_deref().ok())
        .unwrap_or_default();
    let ours_lb = lbs.iter().filter(|l| l.tags.contains(&tag));
    match r {
        Resource::Instances => servers.len() as u64,
        Resource::Cores => servers.iter().map(|s| u64::from(s.flavor.vcpus)).sum(),
        Resource::Ram => servers.iter().map(|s| s.flavor.ram).sum(),
        Resource::ServerGroups => {
            let prefix = resource_name(&spec.name, "");
            facts
                .server_groups
                .as_deref()
                .unwrap_or_default()
                .iter()
                .filter(|g| g.name.starts_with(&prefix))
                .count() as u64
        }
        Resource::ServerGroupMembers => 0,
        Resource::Volumes => volumes.len() as u64,
        Resource::Gigabytes => volumes.iter().map(|v| v.size).sum(),
        Resource::Networks => ours_net.len() as u64,
        Resource::Subnets => tagged(facts.subnets.as_deref().unwrap_or_default(), &tag, |s| {
            &s.tags
        }),
        Resource::Routers => tagged(facts.routers.as_deref().unwrap_or_default(), &tag, |s| {
            &s.tags
        }),
        Resource::Ports => {
            // Tagged ports, the ports on this cluster's own network (DHCP, router interface), and the VIP port.
            let vips: BTreeSet<&str> = ours_lb
                .clone()
                .filter_map(|l| l.vip_port_id.as_deref())
                .collect();
            facts
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .filter(|p| {
                    p.tags.contains(&tag)
                        || ours_net.contains(p.network_id.as_str())
                        || vips.contains(p.id.as_str())
                })
                .count() as u64
        }
        Resource::FloatingIps => facts.floating_ips.as_deref().unwrap_or_default().len() as u64,
        Resource::SecurityGroups => {
            facts.security_groups.as_deref().unwrap_or_default().len() as u64
        }
        Resource::SecurityGroupRules => facts
            .security_groups
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|g| g.security_group_rules.len() as u64)
            .sum(),
        Resource::LoadBalancers => ours_lb.count() as u64,
    }
}

fn tagged<T>(items: &[T], tag: &str, tags: fn(&T) -> &Vec<String>) -> u64 {
    items
        .iter()
        .filter(|x| tags(x).iter().any(|t| t == tag))
        .count() as u64
}

/// `(resource, in use, limit)` for each resource the services report; a service that could not be read is a
/// warning naming what was not checked.
fn usage(cx: &mut Cx, facts: &Facts) -> Vec<(Resource, i64, i64)> {
    let mut lines = Vec::new();
    let unchecked = |cx: &mut Cx, what: &str, e: &CloudError| {
        cx.push(
            Diagnostic::warning(
                Code::QuotaUnchecked,
                "",
                format!("could not read the {what} quota, so it was not checked: {e}"),
            )
            .help("if it is too small, creating the cluster stops half-way; `kos up` again resumes it"),
        );
    };
    match &facts.compute_limits {
        Ok(l) => lines.extend([
            (
                Resource::Instances,
                l.total_instances_used,
                l.max_total_instances,
            ),
            (Resource::Cores, l.total_cores_used, l.max_total_cores),
            (Resource::Ram, l.total_ram_used, l.max_total_ram_size),
            (
                Resource::ServerGroups,
                l.total_server_groups_used,
                l.max_server_groups,
            ),
            (Resource::ServerGroupMembers, 0, l.max_server_group_members),
        ]),
        Err(e) => unchecked(cx, "compute", e),
    }
    let line = |r: Resource, q: Option<&QuotaUsage>| q.map(|q| (r, q.used + q.reserved, q.limit));
    match &facts.network_quotas {
        Ok(q) => lines.extend(
            [
                (Resource::Networks, "network"),
                (Resource::Subnets, "subnet"),
                (Resource::Routers, "router"),
                (Resource::Ports, "port"),
                (Resource::FloatingIps, "floatingip"),
                (Resource::SecurityGroups, "security_group"),
                (Resource::SecurityGroupRules, "security_group_rule"),
            ]
            .into_iter()
            .filter_map(|(r, k)| line(r, q.get(k))),
        ),
        Err(e) => unchecked(cx, "network", e),
    }
    match &facts.volume_quotas {
        Some(Ok(q)) => lines.extend(
            [
                (Resource::Volumes, "volumes"),
                (Resource::Gigabytes, "gigabytes"),
            ]
            .into_iter()
            .filter_map(|(r, k)| line(r, q.get(k))),
        ),
        Some(Err(e)) => unchecked(cx, "block storage", e),
        None => {}
    }
    match (&facts.lb_quotas, &facts.load_balancers) {
        (Some(Ok(q)), Some(Ok(lbs))) => {
            if let Some(limit) = q.loadbalancer {
                lines.push((Resource::LoadBalancers, lbs.len() as i64, limit));
            }
        }
        (Some(Err(e)), _) | (_, Some(Err(e))) => unchecked(cx, "load balancer", e),
        _ => {}
    }
    lines
}

/// Builds the table and reports what is short; returns every line checked.
pub(crate) fn check(
    cx: &mut Cx,
    spec: &ClusterSpec,
    facts: &Facts,
    resolved: Option<&Resolved>,
) -> QuotaTable {
    let sites = sites(spec);
    // Flavors as resolved, or as far as they could be found: quota is still worth reporting next to a typo.
    let all = facts.flavors.as_deref().unwrap_or_default();
    let flavors: Vec<Option<&Flavor>> = sites
        .iter()
        .map(|s| {
            let by_id = resolved.and_then(|r| {
                let id = match s.pool {
                    None => &r.control_plane.flavor_id,
                    Some(p) => &r.pools.get(p)?.flavor_id,
                };
                all.iter().find(|f| &f.id == id)
            });
            by_id.or_else(
                || match super::resolve::find_flavor(all, &s.machine.flavor.value)[..] {
                    [one] => Some(one),
                    _ => None,
                },
            )
        })
        .collect();
    let planned = planned(spec, &sites, &flavors);
    let usage = usage(cx, facts);
    let rows: Vec<QuotaRow> = planned
        .iter()
        .filter_map(|&(r, total)| {
            let &(_, used, limit) = usage.iter().find(|(x, ..)| *x == r)?;
            let need = if r == Resource::ServerGroupMembers {
                total
            } else {
                total.saturating_sub(existing(spec, facts, r))
            };
            Some(QuotaRow {
                resource: r,
                need,
                in_use: u64::try_from(used).unwrap_or(0),
                limit: u64::try_from(limit).ok(),
            })
        })
        .collect();
    let table = QuotaTable { rows };
    let short = table.short();
    if !short.is_empty() {
        let mut d = Diagnostic::error(
            Code::QuotaShort,
            "",
            format!(
                "the project's quota is too small for this cluster: {}",
                some_of(
                    short
                        .rows
                        .iter()
                        .map(|r| format!("{} short by {}", r.resource, r.short())),
                    16
                )
            ),
        )
        .help(format!(
            "ask the cloud's operator to raise these quotas, or lower the counts or flavors:\n{}",
            short.to_string().trim_end()
        ));
        let mut seen: BTreeSet<usize> = BTreeSet::new();
        for (span, text) in short
            .rows
            .iter()
            .flat_map(|r| labels(spec, &sites, r.resource))
        {
            if seen.insert(span.offset()) {
                d = d.label(span, text);
            }
        }
        cx.push(d);
    }
    table
}

/// Where in the spec a short resource comes from.
fn labels(spec: &ClusterSpec, sites: &[Site<'_>], r: Resource) -> Vec<(SourceSpan, String)> {
    use Resource as R;
    match r {
        R::Instances | R::Cores | R::Ram | R::ServerGroupMembers => sites
            .iter()
            .filter(|s| s.count.value > 0)
            .map(|s| (s.count.span, plural(s.count.value, "server")))
            .collect(),
        R::ServerGroups => sites
            .iter()
            .filter(|s| policy(spec, s) != ServerGroupPolicy::None)
            .map(|s| (s.count.span, "one server group".to_owned()))
            .collect(),
        R::Volumes | R::Gigabytes => sites
            .iter()
            .filter(|s| s.count.value > 0 && s.machine.boot_volume.is_some())
            .map(|s| (s.count.span, plural(s.count.value, "boot volume")))
            .collect(),
        R::FloatingIps | R::LoadBalancers => {
            vec![(spec.api_endpoint.kind.span, "needs one".into())]
        }
        R::Networks | R::Subnets | R::Routers | R::Ports => match &spec.network.source {
            NetworkSource::Create(c) => vec![(c.cidr.span, "a new network".into())],
            NetworkSource::Existing(e) => vec![(e.subnet.span, "ports on this subnet".into())],
        },
        R::SecurityGroups | R::SecurityGroupRules => Vec::new(),
    }
}
