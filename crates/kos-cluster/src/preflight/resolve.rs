//! Existence checks: every name of the spec resolved to exactly one cloud object, or a diagnostic saying
//! why not. Problems about one value used in several places (a flavor shared by pools) are one diagnostic
//! with a label at each place.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;
use kos_cloud::ApiErrorKind;
use kos_cloud::CloudError;
use kos_cloud::model::block_storage::{VolumeType, VolumeZone};
use kos_cloud::model::compute::{AvailabilityZone, Flavor};
use kos_cloud::model::image::Image;
use kos_cloud::model::network::{Network, Port, Router, Subnet};

use super::facts::Facts;
use super::{Cx, cidr, plural, some_of};
use crate::diagnostics::{Code, Diagnostic};
use crate::names::{PoolName, cluster_tag};
use crate::resolved::{
    ExternalNetwork, Resolved, ResolvedBootVolume, ResolvedMachine, ResolvedNetwork,
};
use crate::spec::{
    ClusterSpec, EndpointKind, ExistingNetwork, ImageRef, Machine, NetworkSource, ResourceRef,
    Spanned,
};

/// kubeadm's preflight refuses control planes below these (NumCPU; Mem, ~1700 MB, rounded to what
/// flavors offer).
const CP_MIN_VCPUS: u32 = 2;
const CP_MIN_RAM_MB: u64 = 2048;

/// Neutron's device owners for a router's port on a subnet (legacy, DVR, HA).
pub(crate) const ROUTER_INTERFACE_OWNERS: [&str; 3] = [
    "network:router_interface",
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
];

/// A machine of the spec and where it is written.
pub(crate) struct Site<'a> {
    /// `spec.controlPlane` or `spec.nodePools[i]`.
    pub path: String,
    pub machine: &'a Machine,
    pub control_plane: bool,
    pub pool: Option<&'a PoolName>,
    pub count: Spanned<u32>,
}

pub(crate) fn sites(spec: &ClusterSpec) -> Vec<Site<'_>> {
    let cp = Site {
        path: "spec.controlPlane".into(),
        machine: &spec.control_plane.machine,
        control_plane: true,
        pool: None,
        count: spec.control_plane.count.map(|c| c.get()),
    };
    let pools = spec.node_pools.iter().enumerate().map(|(i, p)| Site {
        path: format!("spec.nodePools[{i}]"),
        machine: &p.machine,
        control_plane: false,
        pool: Some(&p.name.value),
        count: p.count,
    });
    std::iter::once(cp).chain(pools).collect()
}

/// Resolves everything; `None` when anything could not be (the diagnostics say why).
pub(crate) fn resolve(cx: &mut Cx, spec: &ClusterSpec, facts: &Facts) -> Option<Resolved> {
    let sites = sites(spec);
    let flavors = cx
        .got("list flavors", &facts.flavors)
        .map(|all| flavors(cx, &sites, all))
        .unwrap_or_else(|| vec![None; sites.len()]);
    let images = images(cx, &sites, facts);
    let zones = zones(cx, facts);
    let volume_zones = volume_zones(cx, facts);
    let types = facts
        .volume_types
        .as_ref()
        .and_then(|t| cx.got("list volume types", t));
    let all = facts.flavors.as_deref().unwrap_or_default();
    let types = types.map(Vec::as_slice);
    let machines: Vec<Option<ResolvedMachine>> = sites
        .iter()
        .zip(&flavors)
        .zip(&images)
        .map(|((site, flavor), image)| {
            let clouds = Zones {
                compute: zones.as_deref(),
                volume: volume_zones.as_deref(),
            };
            machine(cx, site, *flavor, *image, all, clouds, types)
        })
        .collect();

    let networks = cx.got("list networks", &facts.networks);
    let subnets = cx.got("list subnets", &facts.subnets);
    let routers = cx.got("list routers", &facts.routers);
    let ports = cx.got("list ports", &facts.ports);
    let (network, external) = match (networks, subnets, routers, ports) {
        (Some(n), Some(s), Some(r), Some(p)) => {
            let net = Net {
                networks: n,
                subnets: s,
                routers: r,
                ports: p,
            };
            network(cx, spec, &net)
        }
        _ => (None, None),
    };
    let lb_provider = provider(cx, spec, facts);
    let service_lb_provider = service_provider(cx, spec, facts);
    let ccm_roles = ccm_roles(cx, facts);
    let csi_volume_zone = csi_volume_zone(
        cx,
        spec,
        Zones {
            compute: zones.as_deref(),
            volume: volume_zones.as_deref(),
        },
    );

    let mut machines = machines.into_iter();
    let control_plane = machines.next().flatten();
    let pools: Option<BTreeMap<PoolName, ResolvedMachine>> = sites
        .iter()
        .skip(1)
        .zip(machines)
        .map(|(s, m)| Some((s.pool?.clone(), m?)))
        .collect();
    Some(Resolved {
        external_network: external?,
        network: network?,
        control_plane: control_plane?,
        pools: pools?,
        lb_provider: lb_provider?,
        service_lb_provider: service_lb_provider?,
        ccm_roles: ccm_roles?,
        csi_volume_zone: csi_volume_zone?,
    })
}

/// The roles the cloud controller's credential gets; the user must hold a member role, since a
/// credential has no role its creator lacks.
fn ccm_roles(cx: &mut Cx, facts: &Facts) -> Option<Vec<String>> {
    crate::credential::ccm_roles(&facts.token_roles)
        .map_err(|e| {
            cx.push(
                Diagnostic::error(Code::CredentialRoles, "", e.to_string()).help(
                    "ask the cloud's administrators for the member role on the project (`openstack \
                     role add --user <you> --project <project> member`), or run kos as a user who \
                     has it (clouds.yaml's `auth`, or OS_CLOUD); kos never gives the credential \
                     admin",
                ),
            );
        })
        .ok()
}

// ---------------------------------------------------------------- flavors

fn describe_flavor(f: &Flavor) -> String {
    format!(
        "{} ({}, {} MiB RAM, {} GB disk)",
        f.name,
        plural(f.vcpus, "vCPU"),
        f.ram,
        f.disk
    )
}

/// The usable flavors, smallest first: what help texts offer instead.
fn offer(all: &[Flavor]) -> impl Iterator<Item = &Flavor> {
    let mut v: Vec<&Flavor> = all.iter().filter(|f| !f.disabled).collect();
    v.sort_by_key(|f| (f.vcpus, f.ram, f.disk, f.name.clone()));
    v.into_iter()
}

/// Nova flavor ids are free-form (`1`, `m1.small`): an id match wins over a name match.
pub(crate) fn find_flavor<'f>(all: &'f [Flavor], s: &str) -> Vec<&'f Flavor> {
    let by_id: Vec<&Flavor> = all.iter().filter(|f| f.id == s).collect();
    if by_id.is_empty() {
        all.iter().filter(|f| f.name == s).collect()
    } else {
        by_id
    }
}

fn flavors<'f>(cx: &mut Cx, sites: &[Site<'_>], all: &'f [Flavor]) -> Vec<Option<&'f Flavor>> {
    let mut out = vec![None; sites.len()];
    let mut seen: Vec<&str> = Vec::new();
    for site in sites {
        let wanted = site.machine.flavor.value.as_str();
        if seen.contains(&wanted) {
            continue;
        }
        seen.push(wanted);
        let users: Vec<usize> = (0..sites.len())
            .filter(|&i| sites[i].machine.flavor.value == wanted)
            .collect();
        let field = format!("{}.flavor", site.path);
        let d = match find_flavor(all, wanted)[..] {
            [one] => {
                users.iter().for_each(|&i| out[i] = Some(one));
                continue;
            }
            [] => Diagnostic::error(
                Code::FlavorNotFound,
                &field,
                format!("no flavor has the name or id `{wanted}`"),
            )
            .help(format!(
                "use one of this cloud's flavors: {}",
                some_of(offer(all).map(describe_flavor), 12)
            )),
            ref several => Diagnostic::error(
                Code::FlavorNotFound,
                &field,
                format!(
                    "{} are named `{wanted}`: {}",
                    plural(several.len() as u64, "flavor"),
                    some_of(several.iter().map(|f| f.id.clone()), 8)
                ),
            )
            .help("use the id of the one you mean"),
        };
        cx.push(label_all(
            d,
            users.iter().map(|&i| sites[i].machine.flavor.span),
            "not on this cloud",
        ));
    }
    out
}

fn label_all(
    mut d: Diagnostic,
    spans: impl IntoIterator<Item = miette::SourceSpan>,
    text: &str,
) -> Diagnostic {
    for s in spans {
        d = d.label(s, text);
    }
    d
}

// ---------------------------------------------------------------- images

fn images<'f>(cx: &mut Cx, sites: &[Site<'_>], facts: &'f Facts) -> Vec<Option<&'f Image>> {
    let mut out = vec![None; sites.len()];
    for (r, found) in &facts.images {
        let users: Vec<usize> = (0..sites.len())
            .filter(|&i| &sites[i].machine.image.value == r)
            .collect();
        let Some(&first) = users.first() else {
            continue;
        };
        let field = format!("{}.image", sites[first].path);
        let spans = users.iter().map(|&i| sites[i].machine.image.span);
        let Some(found) = cx.got("look up images", found) else {
            continue;
        };
        let d = match &found[..] {
            [one] if one.status.as_str() == "active" => {
                users.iter().for_each(|&i| out[i] = Some(one));
                continue;
            }
            [one] => Diagnostic::error(
                Code::ImageUnusable,
                &field,
                format!("image `{}` ({}) is `{}`, not active", one.name, one.id, one.status),
            )
            .help("wait until its upload has finished, or choose another image"),
            [] => Diagnostic::error(Code::ImageNotFound, &field, not_found(r)).help(
                "`openstack image list` shows the images this project can use; give a name, an id, or \
                 `{tags: [...]}`",
            ),
            several => Diagnostic::error(
                Code::ImageAmbiguous,
                &field,
                format!(
                    "{} {}: {}",
                    several.len(),
                    matching(r),
                    some_of(several.iter().map(|i| i.id.clone()), 8)
                ),
            )
            .help(
                "use the id of the one you mean: kos never picks one, an image changing under a cluster is \
                 worse than a stop",
            ),
        };
        cx.push(label_all(d, spans, "this image"));
    }
    out
}

fn not_found(r: &ImageRef) -> String {
    match r {
        ImageRef::Ref(ResourceRef::Id(id)) => format!("no image has the id `{id}`"),
        ImageRef::Ref(ResourceRef::Name(n)) => format!("no image is named `{n}`"),
        ImageRef::Tags(t) => format!("no image carries all the tags [{}]", t.join(", ")),
    }
}

fn matching(r: &ImageRef) -> String {
    match r {
        ImageRef::Ref(ResourceRef::Id(id)) => format!("images have the id `{id}`"),
        ImageRef::Ref(ResourceRef::Name(n)) => format!("images named `{n}`"),
        ImageRef::Tags(t) => format!("images carry all the tags [{}]", t.join(", ")),
    }
}

// ---------------------------------------------------------------- zones

/// The compute zones, or `None` when they cannot be checked (reported once, here).
fn zones(cx: &mut Cx, facts: &Facts) -> Option<Vec<AvailabilityZone>> {
    listed_zones(
        cx,
        facts.zones.as_ref()?,
        "list availability zones",
        "this cloud does not list its availability zones: the spec's zones (and whether CSI \
         volumes' zones are Cinder's) were not checked",
        "if a zone is wrong, servers in it fail to schedule; check the names with the operator",
    )
}

/// Cinder's zones, or `None` when Cinder does not list them (a warning, here): boot volumes then go
/// to their server's compute zone, unchecked.
fn volume_zones(cx: &mut Cx, facts: &Facts) -> Option<Vec<VolumeZone>> {
    listed_zones(
        cx,
        facts.volume_zones.as_ref()?,
        "list Cinder's availability zones",
        "Cinder does not list its availability zones: boot and CSI volumes go to their server's \
         compute zone (or the spec's `bootVolume.availabilityZone`, `addons.csiAvailabilityZone`), \
         unchecked",
        "if Cinder's zones differ from the compute zones, ask the operator for them and set \
         `bootVolume.availabilityZone` and `addons.csiAvailabilityZone`",
    )
}

/// A zone list, or `None` with a warning when the service does not list zones (404, 403, 400: an
/// extension switched off or a policy), or with the error of any other failure.
fn listed_zones<T: Clone>(
    cx: &mut Cx,
    answer: &Result<Vec<T>, CloudError>,
    what: &str,
    unlisted: &str,
    help: &str,
) -> Option<Vec<T>> {
    if let Err(CloudError::Api {
        kind: ApiErrorKind::NotFound | ApiErrorKind::Forbidden | ApiErrorKind::BadRequest,
        ..
    }) = answer
    {
        cx.push(Diagnostic::warning(Code::AzUnchecked, "", unlisted).help(help));
        return None;
    }
    cx.got(what, answer).cloned()
}

/// What preflight knows of the cloud's zones: Nova's and Cinder's, each `None` when not listed.
#[derive(Clone, Copy)]
struct Zones<'a> {
    compute: Option<&'a [AvailabilityZone]>,
    volume: Option<&'a [VolumeZone]>,
}

/// The spec's `bootVolume.availabilityZone` must be one of Cinder's zones (not Nova's): Cinder refuses
/// any other with a 400, after the servers' ports are made.
fn volume_zone(cx: &mut Cx, path: &str, m: &Machine, cinder: Option<&[VolumeZone]>) -> bool {
    let (Some(cinder), Some(z)) = (
        cinder,
        m.boot_volume
            .as_ref()
            .and_then(|b| b.availability_zone.as_ref()),
    ) else {
        return true;
    };
    let problem = match cinder.iter().find(|k| k.name == z.value) {
        None => format!("Cinder has no availability zone named `{}`", z.value),
        Some(k) if !k.state.available => {
            format!("Cinder's availability zone `{}` is not available", k.name)
        }
        Some(_) => return true,
    };
    cx.push(
        Diagnostic::error(
            Code::AzNotFound,
            &format!("{path}.bootVolume.availabilityZone"),
            problem,
        )
        .label(z.span, "not one of Cinder's zones")
        .help(format!(
            "set `bootVolume.availabilityZone` to one of Cinder's zones: {} (`openstack availability \
             zone list --volume`), or leave it out: kos then uses the server's compute zone when \
             Cinder has it, else Cinder's only zone, else Cinder's default",
            some_of(
                cinder
                    .iter()
                    .filter(|k| k.state.available)
                    .map(|k| k.name.clone()),
                12
            )
        )),
    );
    false
}

/// The Cinder zone the CSI driver makes volumes in, or `None` when a volume can go to its node's
/// compute zone; the outer `None` is an error (reported here).
///
/// External-provisioner asks for a volume in the zone of the node a pod landed on, and Cinder
/// refuses a zone it lacks (400 "Availability zone 'az1' is invalid"): the claim never binds. So
/// when a zone the nodes may land in (the machines' `availabilityZones`, else all of Nova's) is not
/// Cinder's, the volumes go to the spec's `addons.csiAvailabilityZone`, else to Cinder's only zone.
/// The spec's zone, when given, is always used (checked against Cinder's).
fn csi_volume_zone(cx: &mut Cx, spec: &ClusterSpec, clouds: Zones<'_>) -> Option<Option<String>> {
    if !super::facts::uses_csi(spec) {
        return Some(None);
    }
    let available = |all: &[VolumeZone]| -> Vec<String> {
        all.iter()
            .filter(|k| k.state.available)
            .map(|k| k.name.clone())
            .collect()
    };
    let field = "spec.addons.csiAvailabilityZone";
    if let Some(z) = &spec.addons.csi_availability_zone {
        let Some(cinder) = clouds.volume else {
            // Cinder does not list its zones (warned where they were read): taken as written.
            return Some(Some(z.value.clone()));
        };
        let problem = match cinder.iter().find(|k| k.name == z.value) {
            None => format!("Cinder has no availability zone named `{}`", z.value),
            Some(k) if !k.state.available => {
                format!("Cinder's availability zone `{}` is not available", k.name)
            }
            Some(_) => return Some(Some(z.value.clone())),
        };
        cx.push(
            Diagnostic::error(Code::AzNotFound, field, problem)
                .label(z.span, "not one of Cinder's zones")
                .help(format!(
                    "set `addons.csiAvailabilityZone` to one of Cinder's zones: {} (`openstack \
                     availability zone list --volume`), or leave it out when every compute zone \
                     the nodes use is also Cinder's",
                    some_of(available(cinder), 12)
                )),
        );
        return None;
    }
    let (Some(cinder), Some(nova)) = (clouds.volume, clouds.compute) else {
        // A list is missing (warned where it was read): volumes go to their node's zone, as upstream.
        return Some(None);
    };
    let cinder = available(cinder);
    let mut lacking: Vec<String> = Vec::new();
    for m in super::facts::machines(spec) {
        let node_zones: Vec<&str> = if m.availability_zones.is_empty() {
            nova.iter()
                .filter(|k| k.state.available)
                .map(|k| k.name.as_str())
                .collect()
        } else {
            m.availability_zones
                .iter()
                .map(|z| z.value.as_str())
                .collect()
        };
        for z in node_zones {
            if !cinder.iter().any(|c| c == z) && !lacking.iter().any(|l| l == z) {
                lacking.push(z.to_owned());
            }
        }
    }
    if lacking.is_empty() {
        return Some(None);
    }
    if let [only] = cinder.as_slice() {
        tracing::info!(
            zone = %only,
            compute_zones = %lacking.join(", "),
            "the nodes' compute zones are not Cinder's: CSI volumes go to Cinder's only zone"
        );
        return Some(Some(only.clone()));
    }
    cx.push(
        Diagnostic::error(
            Code::CsiZoneUnknown,
            field,
            format!(
                "Cinder has no zone named as the compute zones {} the nodes may land in, and \
                 several zones of its own ({}): the CSI driver's volumes would be refused (\
                 \"Availability zone '…' is invalid\") and claims would never bind",
                some_of(lacking.iter().map(|z| format!("`{z}`")), 12),
                some_of(cinder.iter().cloned(), 12),
            ),
        )
        .help(format!(
            "set `addons.csiAvailabilityZone` to the Cinder zone the cluster's volumes go to (one \
             of: {}); Nova attaches them across zones where the cloud allows it (`[cinder] \
             cross_az_attach`, its default)",
            some_of(cinder.iter().cloned(), 12)
        )),
    );
    None
}

// ---------------------------------------------------------------- machines

/// The per-machine checks that need the flavor and the image together, then the resolved machine.
fn machine(
    cx: &mut Cx,
    site: &Site<'_>,
    flavor: Option<&Flavor>,
    image: Option<&Image>,
    all_flavors: &[Flavor],
    clouds: Zones<'_>,
    types: Option<&[VolumeType]>,
) -> Option<ResolvedMachine> {
    let m = site.machine;
    let path = &site.path;
    let boot = m.boot_volume.as_ref();
    let mut ok = volume_zone(cx, path, m, clouds.volume);
    if let Some(zones) = clouds.compute {
        for (i, z) in m.availability_zones.iter().enumerate() {
            let known = zones.iter().find(|k| k.name == z.value);
            let problem = match known {
                None => format!("no availability zone is named `{}`", z.value),
                Some(k) if !k.state.available => {
                    format!("availability zone `{}` is not available", k.name)
                }
                Some(_) => continue,
            };
            ok = false;
            cx.push(
                Diagnostic::error(
                    Code::AzNotFound,
                    &format!("{path}.availabilityZones[{i}]"),
                    problem,
                )
                .label(z.span, "not a usable zone")
                .help(format!(
                    "use the compute zones of this cloud: {}",
                    some_of(
                        zones
                            .iter()
                            .filter(|k| k.state.available)
                            .map(|k| k.name.clone()),
                        12
                    )
                )),
            );
        }
    }
    if let (Some(types), Some(t)) = (types, boot.and_then(|b| b.volume_type.as_ref()))
        && !types.iter().any(|k| k.name == t.value || k.id == t.value)
    {
        ok = false;
        cx.push(
            Diagnostic::error(
                Code::VolumeTypeNotFound,
                &format!("{path}.bootVolume.type"),
                format!("no volume type is named `{}`", t.value),
            )
            .label(t.span, "not on this cloud")
            .help(format!(
                "use one of: {} (or leave `type` out for the cloud's default)",
                some_of(types.iter().map(|k| k.name.clone()), 12)
            )),
        );
    }
    let (flavor, image) = (flavor?, image?);
    let flavor_span = m.flavor.span;
    let field = format!("{path}.flavor");
    if site.control_plane && (flavor.vcpus < CP_MIN_VCPUS || flavor.ram < CP_MIN_RAM_MB) {
        ok = false;
        let fits = offer(all_flavors).find(|f| {
            f.vcpus >= CP_MIN_VCPUS && f.ram >= CP_MIN_RAM_MB && (f.disk > 0 || boot.is_some())
        });
        cx.push(
            Diagnostic::error(
                Code::FlavorTooSmall,
                &field,
                format!(
                    "flavor `{}` has {} and {} MiB RAM; a control plane needs at least {CP_MIN_VCPUS} vCPUs \
                     and {CP_MIN_RAM_MB} MiB",
                    flavor.name,
                    plural(flavor.vcpus, "vCPU"),
                    flavor.ram
                ),
                )
            .label(flavor_span, "too small for a control plane")
            .help(match fits {
                Some(f) => format!(
                    "kubeadm's own preflight would stop on the node; choose a bigger flavor, e.g. `{}`",
                    f.name
                ),
                None => "kubeadm's own preflight would stop on the node; choose a bigger flavor".into(),
            }),
        );
    }
    if flavor.disk == 0 && boot.is_none() {
        ok = false;
        cx.push(
            Diagnostic::error(
                Code::FlavorTooSmall,
                &field,
                format!("flavor `{}` has no root disk (disk: 0)", flavor.name),
            )
            .label(flavor_span, "no root disk")
            .help(format!(
                "boot from a volume: add `bootVolume: {{sizeGB: 50}}` to `{path}`"
            )),
        );
    }
    let (root_gb, root_what) = match boot {
        Some(b) => (u64::from(b.size_gb), "the boot volume has".to_owned()),
        None => (flavor.disk, format!("flavor `{}` has", flavor.name)),
    };
    if root_gb > 0 && image.min_disk > root_gb {
        ok = false;
        cx.push(
            Diagnostic::error(
                Code::ImageUnusable,
                &format!("{path}.image"),
                format!(
                    "image `{}` needs a {} GB root disk; {root_what} {root_gb} GB",
                    image.name, image.min_disk
                ),
            )
            .label(m.image.span, "needs a bigger disk")
            .help(format!(
                "set `bootVolume.sizeGB` to at least {} or choose a flavor with a bigger disk",
                image.min_disk
            )),
        );
    }
    if image.min_ram > flavor.ram {
        ok = false;
        cx.push(
            Diagnostic::error(
                Code::ImageUnusable,
                &format!("{path}.image"),
                format!(
                    "image `{}` needs {} MiB RAM; flavor `{}` has {} MiB",
                    image.name, image.min_ram, flavor.name, flavor.ram
                ),
            )
            .label(flavor_span, "too little RAM for the image")
            .help("choose a flavor with more RAM"),
        );
    }
    ok.then(|| ResolvedMachine {
        flavor_id: flavor.id.clone(),
        flavor_name: flavor.name.clone(),
        vcpus: flavor.vcpus,
        ram_mb: flavor.ram,
        disk_gb: flavor.disk,
        image_id: image.id.clone(),
        availability_zones: m
            .availability_zones
            .iter()
            .map(|z| z.value.clone())
            .collect(),
        boot_volume: boot.map(|b| ResolvedBootVolume {
            size_gb: b.size_gb,
            volume_type: b.volume_type.as_ref().map(|t| t.value.clone()),
            availability_zone: b.availability_zone.as_ref().map(|z| z.value.clone()),
            cinder_zones: clouds.volume.map(|all| {
                all.iter()
                    .filter(|k| k.state.available)
                    .map(|k| k.name.clone())
                    .collect()
            }),
        }),
    })
}

// ---------------------------------------------------------------- networks

/// The Neutron lists the network checks read.
pub(crate) struct Net<'a> {
    pub networks: &'a [Network],
    pub subnets: &'a [Subnet],
    pub routers: &'a [Router],
    pub ports: &'a [Port],
}

impl Net<'_> {
    /// The routers with an interface on `subnet_id`.
    pub fn routers_on(&self, subnet_id: &str) -> Vec<&Router> {
        self.routers
            .iter()
            .filter(|r| {
                self.ports.iter().any(|p| {
                    p.device_id == r.id
                        && ROUTER_INTERFACE_OWNERS.contains(&p.device_owner.as_str())
                        && p.fixed_ips.iter().any(|ip| ip.subnet_id == subnet_id)
                })
            })
            .collect()
    }
}

/// By id, or by exact name.
fn find_ref<'a, T>(
    items: &'a [T],
    r: &ResourceRef,
    id: fn(&T) -> &str,
    name: fn(&T) -> &str,
) -> Vec<&'a T> {
    items
        .iter()
        .filter(|x| match r {
            ResourceRef::Id(s) => id(x) == s,
            ResourceRef::Name(s) => name(x) == s,
        })
        .collect()
}

/// The node network and the external network.
fn network(
    cx: &mut Cx,
    spec: &ClusterSpec,
    net: &Net<'_>,
) -> (Option<ResolvedNetwork>, Option<ExternalNetwork>) {
    match &spec.network.source {
        NetworkSource::Create(c) => {
            let ext = external(cx, spec, net, None);
            cidr::check_create(cx, spec, net, ext.as_ref());
            let resolved = ResolvedNetwork::Create {
                cidr: c.cidr.value,
                dns_servers: c.dns_servers.clone(),
            };
            (Some(resolved), ext)
        }
        NetworkSource::Existing(e) => existing(cx, spec, e, net),
    }
}

fn external(
    cx: &mut Cx,
    spec: &ClusterSpec,
    net: &Net<'_>,
    gateway: Option<&str>,
) -> Option<ExternalNetwork> {
    const FIELD: &str = "spec.network.externalNetwork";
    let ext: Vec<&Network> = net.networks.iter().filter(|n| n.external).collect();
    let list = |v: &[&Network]| some_of(v.iter().map(|n| format!("{} ({})", n.name, n.id)), 8);
    let chosen: Vec<&Network> = match &spec.network.external_network {
        Some(r) => {
            let all = find_ref(net.networks, &r.value, |n| &n.id, |n| &n.name);
            let external: Vec<&Network> = all.iter().copied().filter(|n| n.external).collect();
            if external.is_empty() {
                let problem = if all.is_empty() {
                    format!("no network is named `{}`", r.value)
                } else {
                    format!(
                        "network `{}` is not external (router:external is false)",
                        r.value
                    )
                };
                cx.push(
                    Diagnostic::error(Code::ExternalNetworkNotFound, FIELD, problem)
                        .label(r.span, "not an external network")
                        .help(format!("external networks of this cloud: {}", list(&ext))),
                );
                return None;
            }
            external
        }
        None => match gateway.and_then(|g| ext.iter().find(|n| n.id == g)) {
            Some(n) => vec![*n],
            None => ext.clone(),
        },
    };
    match chosen[..] {
        [one] => Some(ExternalNetwork {
            id: one.id.clone(),
            name: one.name.clone(),
        }),
        [] => {
            cx.push(
                Diagnostic::error(
                    Code::ExternalNetworkNotFound,
                    FIELD,
                    "this cloud has no external network (router:external): floating IPs and the router's \
                     gateway need one",
                )
                .help("ask the operator which network provides floating IPs and set `spec.network.externalNetwork`"),
            );
            None
        }
        ref several => {
            let named = spec.network.external_network.as_ref();
            let d = Diagnostic::error(
                Code::ExternalNetworkAmbiguous,
                FIELD,
                match named {
                    Some(r) => format!("{} external networks are named `{}`: {}", several.len(), r.value, list(several)),
                    None => format!(
                        "{} external networks and the spec names none: {}",
                        several.len(),
                        list(several)
                    ),
                },
            )
            .help("set `spec.network.externalNetwork` to the id of the one floating IPs should come from");
            cx.push(match named {
                Some(r) => d.label(r.span, "several match"),
                None => d,
            });
            None
        }
    }
}

/// One bring-your-own object, or a diagnostic.
fn byo<'a, T>(
    cx: &mut Cx,
    what: &str,
    field: &str,
    r: &Spanned<ResourceRef>,
    found: Vec<&'a T>,
    id: fn(&T) -> &str,
) -> Option<&'a T> {
    let problem = match found[..] {
        [one] => return Some(one),
        [] => format!("no {what} `{}` is visible to the project", r.value),
        ref several => format!(
            "{} {what}s are named `{}`: {}",
            several.len(),
            r.value,
            some_of(several.iter().map(|x| id(x).to_owned()), 8)
        ),
    };
    let help = if found.is_empty() {
        format!(
            "create the {what} first, or fix the name; kos never creates or deletes a {what} it is given"
        )
    } else {
        "use the id of the one you mean".into()
    };
    cx.push(
        Diagnostic::error(Code::ExistingNetwork, field, problem)
            .label(r.span, format!("this {what}"))
            .help(help),
    );
    None
}

fn existing(
    cx: &mut Cx,
    spec: &ClusterSpec,
    e: &ExistingNetwork,
    net: &Net<'_>,
) -> (Option<ResolvedNetwork>, Option<ExternalNetwork>) {
    const P: &str = "spec.network.existing";
    let network = byo(
        cx,
        "network",
        &format!("{P}.network"),
        &e.network,
        find_ref(net.networks, &e.network.value, |n| &n.id, |n| &n.name),
        |n: &Network| &n.id,
    );
    let mut candidates = find_ref(net.subnets, &e.subnet.value, |s| &s.id, |s| &s.name);
    if let (Some(n), true) = (network, candidates.len() > 1) {
        candidates.retain(|s| s.network_id == n.id);
    }
    let subnet = byo(
        cx,
        "subnet",
        &format!("{P}.subnet"),
        &e.subnet,
        candidates,
        |s: &Subnet| &s.id,
    );
    let named_router = e.router.as_ref().and_then(|r| {
        let found = find_ref(net.routers, &r.value, |x| &x.id, |x| &x.name);
        byo(
            cx,
            "router",
            &format!("{P}.router"),
            r,
            found,
            |x: &Router| &x.id,
        )
    });
    // A named router that is missing is reported above; the subnet's own checks still run.
    let router_missing = e.router.is_some() && named_router.is_none();
    let mut ok = network.is_some() && subnet.is_some() && !router_missing;
    if let (Some(n), Some(s)) = (network, subnet)
        && s.network_id != n.id
    {
        ok = false;
        let on = net
            .networks
            .iter()
            .find(|x| x.id == s.network_id)
            .map_or(s.network_id.clone(), |x| x.name.clone());
        cx.push(
            Diagnostic::error(
                Code::ExistingNetwork,
                &format!("{P}.subnet"),
                format!(
                    "subnet `{}` ({}) is on network `{on}`, not on `{}`",
                    s.name, s.cidr, n.name
                ),
            )
            .label(e.subnet.span, "not on this network")
            .label(e.network.span, "this network")
            .help(format!(
                "name a subnet of `{}`: {}",
                n.name,
                some_of(
                    net.subnets
                        .iter()
                        .filter(|x| x.network_id == n.id)
                        .map(|x| format!("{} ({})", x.name, x.cidr)),
                    8
                )
            )),
        );
    }
    let Some(s) = subnet else {
        return (None, external(cx, spec, net, None));
    };
    let Ok(subnet_cidr) = s.cidr.parse::<Ipv4Net>() else {
        cx.push(
            Diagnostic::error(
                Code::ExistingNetwork,
                &format!("{P}.subnet"),
                format!(
                    "subnet `{}` has the CIDR `{}`; kos needs an IPv4 subnet",
                    s.name, s.cidr
                ),
            )
            .label(e.subnet.span, "not IPv4")
            .help("name an IPv4 subnet of the network"),
        );
        return (None, external(cx, spec, net, None));
    };

    // The router: the one named, or the one (if exactly one) with an interface on the subnet.
    let attached = net.routers_on(&s.id);
    let router = named_router.or(match attached[..] {
        [one] => Some(one),
        _ => None,
    });
    let gateway = router
        .and_then(|r| r.external_gateway_info.as_ref())
        .map(|g| g.network_id.as_str());
    let ext = external(cx, spec, net, gateway);
    let public = spec.api_endpoint.public;
    let router_field = format!("{P}.router");
    let router_label = e.router.as_ref().map_or(e.subnet.span, |r| r.span);
    match router {
        Some(r) if !attached.iter().any(|a| a.id == r.id) => {
            let new = if public {
                Diagnostic::error
            } else {
                Diagnostic::warning
            };
            let d = new(
                Code::ExistingNetwork,
                &router_field,
                format!(
                    "router `{}` has no interface on subnet `{}`: {}",
                    r.name,
                    s.name,
                    if public {
                        "floating IPs could not be associated with the API endpoint"
                    } else {
                        "the nodes would have no route out"
                    }
                ),
            )
            .label(router_label, "not connected to the subnet")
            .help(format!(
                "connect them: `openstack router add subnet {} {}`",
                r.name, s.name
            ));
            ok &= !public;
            cx.push(d);
        }
        Some(r) => {
            if let Some(x) = &ext
                && public
                && gateway != Some(x.id.as_str())
            {
                ok = false;
                cx.push(
                    Diagnostic::error(
                        Code::ExistingNetwork,
                        &router_field,
                        format!(
                            "router `{}` has no gateway on the external network `{}`: floating IPs from it \
                             could not reach the subnet",
                            r.name, x.name
                        ),
                    )
                    .label(router_label, "no gateway on the external network")
                    .help(format!("`openstack router set --external-gateway {} {}`", x.name, r.name)),
                );
            }
        }
        None if public && !router_missing => {
            ok = false;
            let several = attached.len() > 1;
            cx.push(
                Diagnostic::error(
                    Code::ExistingNetwork,
                    &router_field,
                    if several {
                        format!(
                            "{} routers have an interface on subnet `{}` and the spec names none",
                            attached.len(),
                            s.name
                        )
                    } else {
                        format!(
                            "no router connects subnet `{}` to the external network: floating IPs could not be \
                             associated with the public API endpoint",
                            s.name
                        )
                    },
                )
                .label(e.subnet.span, "no router named for this subnet")
                .help(if several {
                    "name the one with the gateway on the external network in `spec.network.existing.router`"
                        .to_owned()
                } else {
                    format!(
                        "connect the subnet to a router with a gateway on the external network \
                         (`openstack router add subnet ROUTER {}`) and name it in `spec.network.existing.router`, \
                         or make the endpoint private (`apiEndpoint.public: false`)",
                        s.name
                    )
                }),
            );
        }
        None => {}
    }

    ok &= cidr::check_existing(cx, spec, net, ext.as_ref(), s, subnet_cidr, e.subnet.span);
    ok &= room(cx, spec, net, s, e.subnet.span);
    let resolved = ok.then(|| ResolvedNetwork::Existing {
        network_id: s.network_id.clone(),
        subnet_id: s.id.clone(),
        subnet_cidr,
        router_id: router.map(|r| r.id.clone()),
        router_gateway: router.and_then(crate::observe::router_gateway_ip),
    });
    (resolved, ext)
}

/// Whether the subnet's allocation pools have a free address for every node (and the LB's VIP), counting
/// this cluster's own ports there as already placed.
fn room(
    cx: &mut Cx,
    spec: &ClusterSpec,
    net: &Net<'_>,
    s: &Subnet,
    span: miette::SourceSpan,
) -> bool {
    let Some(capacity) = cidr::capacity(s) else {
        return true;
    };
    let tag = cluster_tag(&spec.name);
    // The gateway address (a router's interface) is outside the allocation pools.
    let on_subnet = |p: &&Port| {
        p.fixed_ips
            .iter()
            .any(|ip| ip.subnet_id == s.id && Some(&ip.ip_address) != s.gateway_ip.as_ref())
    };
    let used = net.ports.iter().filter(on_subnet).count() as u64;
    let ours = net
        .ports
        .iter()
        .filter(on_subnet)
        .filter(|p| p.tags.contains(&tag))
        .count() as u64;
    let lb = u64::from(matches!(
        spec.api_endpoint.kind.value,
        EndpointKind::LoadBalancer { .. }
    ));
    let need = (u64::from(spec.node_count()) + lb).saturating_sub(ours);
    let free = capacity.saturating_sub(used);
    if need <= free {
        return true;
    }
    cx.push(
        Diagnostic::error(
            Code::SubnetFull,
            "spec.network.existing.subnet",
            format!(
                "subnet `{}` ({}) has {free} free address{} and this cluster needs {need} ({}{})",
                s.name,
                s.cidr,
                if free == 1 { "" } else { "es" },
                plural(spec.node_count(), "node"),
                if lb == 1 {
                    " and the load balancer's VIP"
                } else {
                    ""
                }
            ),
        )
        .label(span, "too few free addresses")
        .help("use a bigger subnet, free addresses on it, or lower the node counts"),
    );
    false
}

// ---------------------------------------------------------------- Octavia

/// The Services' provider (`spec.serviceLoadBalancers.provider`, else the API load balancer's) when
/// Octavia offers it; `Some(None)` when the cloud's default is meant.
fn service_provider(cx: &mut Cx, spec: &ClusterSpec, facts: &Facts) -> Option<Option<String>> {
    let Some(explicit) = spec.service_load_balancers.provider else {
        // The API load balancer's provider is checked with the endpoint.
        return Some(spec.service_lb_provider().map(|p| p.as_str().to_owned()));
    };
    let providers = cx.got("list Octavia providers", facts.providers.as_ref()?)?;
    let wanted = explicit.value.as_str();
    if providers.iter().any(|p| p.name == wanted) {
        return Some(Some(wanted.to_owned()));
    }
    cx.push(
        Diagnostic::error(
            Code::ProviderNotFound,
            "spec.serviceLoadBalancers.provider",
            format!("Octavia on this cloud has no provider `{wanted}`"),
        )
        .label(explicit.span, "provider not enabled")
        .help(format!(
            "set `serviceLoadBalancers.provider` to one of the enabled providers: {}",
            some_of(providers.iter().map(|p| p.name.clone()), 8)
        )),
    );
    None
}

/// `Some(None)` for a floating-IP endpoint, `Some(Some(provider))` when the provider is enabled.
fn provider(cx: &mut Cx, spec: &ClusterSpec, facts: &Facts) -> Option<Option<String>> {
    let EndpointKind::LoadBalancer { provider } = spec.api_endpoint.kind.value else {
        return Some(None);
    };
    let providers = cx.got("list Octavia providers", facts.providers.as_ref()?)?;
    let wanted = provider.as_str();
    if providers.iter().any(|p| p.name == wanted) {
        return Some(Some(wanted.to_owned()));
    }
    cx.push(
        Diagnostic::error(
            Code::ProviderNotFound,
            "spec.apiEndpoint.provider",
            format!("Octavia on this cloud has no provider `{wanted}`"),
        )
        .label(spec.api_endpoint.kind.span, "provider not enabled")
        .help(format!(
            "set `apiEndpoint.provider` to one of the enabled providers: {}",
            some_of(providers.iter().map(|p| p.name.clone()), 8)
        )),
    );
    None
}
