//! The rules of `cluster.yaml`, applied while reading the YAML tree into a [`ClusterSpec`].
//!
//! Pure: no IO, no cloud. Each field is read and checked on its own (unknown keys, types, syntax, ranges); then
//! rules across fields run on whatever parts were readable, so one broken section does not hide the problems
//! of another. What needs the cloud (does the flavor exist, does the existing subnet collide) is preflight's.

mod airgap;
mod health;
mod network;
mod read;

use std::collections::BTreeMap;

use miette::SourceSpan;

use crate::diagnostics::{Code, Diagnostic};
use crate::names::{
    self, CLUSTER_NAME_MAX, ClusterName, DnsName, LabelKey, LabelValue, NameError, PoolName, Tag,
};
use crate::spec::{
    API_VERSION, Addons, ApiEndpoint, Autoscaling, BootVolume, Ccm, ClusterSpec, Cni, CniManifest,
    ControlPlane, ControlPlaneCount, Csi, EndpointKind, HealthCheck, ImageRef, KIND,
    KubernetesVersion, LbProvider, Machine, NodePool, ServerGroupPolicy, ServiceLoadBalancers,
    Spanned, SshKeyError, SshPublicKey, Taint, TaintEffect, VersionError,
};
use crate::tree::{Node, Value};
use read::{Cx, Field, Obj, boolean, choice, integer, key_text, list, scalar, string};

/// Reads and checks a parsed document; `None` when any error was found (they are all in `diags`).
pub(crate) fn check(text: &str, root: &Node) -> (Option<ClusterSpec>, Vec<Diagnostic>) {
    let mut cx = Cx {
        text,
        diags: Vec::new(),
    };
    let spec = document(&mut cx, root);
    (spec, cx.diags)
}

fn document(cx: &mut Cx<'_>, root: &Node) -> Option<ClusterSpec> {
    if matches!(root.value, Value::Null) {
        cx.push(
            Diagnostic::error(Code::MissingField, "", "the file is empty")
                .label(root.span, "no content")
                .help(format!(
                    "start from `examples/minimal.yaml`: `apiVersion: {API_VERSION}`, `kind: {KIND}`, \
                     `metadata`, `spec`"
                )),
        );
        return None;
    }
    let doc = Obj::new(
        cx,
        &Field::root(root),
        &["apiVersion", "kind", "metadata", "spec"],
    )?;
    let api_version = doc.req(cx, "apiVersion", |cx, f| {
        exact(cx, f, API_VERSION, Code::ApiVersion)
    });
    let kind = doc.req(cx, "kind", |cx, f| exact(cx, f, KIND, Code::Kind));
    let metadata = doc.req(cx, "metadata", metadata);
    let spec = doc.req(cx, "spec", |cx, f| spec(cx, f));
    let ((name, tags), spec) = (metadata?, spec?);
    api_version?;
    kind?;
    Some(ClusterSpec {
        name,
        tags,
        kubernetes_version: spec.kubernetes_version,
        network: spec.network,
        api_endpoint: spec.api_endpoint,
        control_plane: spec.control_plane,
        node_pools: spec.node_pools,
        addons: spec.addons,
        service_load_balancers: spec.service_load_balancers,
        ssh_public_key: spec.ssh_public_key,
        mirrors: spec.mirrors,
        proxy: spec.proxy,
    })
}

fn exact(cx: &mut Cx<'_>, f: &Field<'_>, want: &str, code: Code) -> Option<()> {
    let s = string(cx, f)?;
    if s.value == want {
        return Some(());
    }
    f.invalid(
        cx,
        code,
        format!("`{}` is not supported", s.value),
        "not supported",
        format!("this kos reads `{want}`"),
    )
}

fn metadata(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<(Spanned<ClusterName>, Vec<Tag>)> {
    let m = Obj::new(cx, f, &["name", "tags"])?;
    let name = m.req(cx, "name", |cx, f| {
        name_value(cx, f, ClusterName::new, "cluster name", CLUSTER_NAME_MAX)
    });
    let tags = m.or(cx, "tags", Vec::new(), tags);
    Some((name?, tags?))
}

/// A DNS-label name (cluster or pool) with a help that says why the limit exists and offers a fixed name.
fn name_value<T>(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    new: fn(&str) -> Result<T, NameError>,
    what: &str,
    max: usize,
) -> Option<Spanned<T>> {
    let s = scalar(cx, f)?;
    let why = format!(
        "kos names servers `kos-<cluster>-<id>` (hostnames, at most 63 characters) and tags them \
         `kos-cluster=<cluster>` (Nova tags, at most 60): a {what} is a DNS label of lowercase letters, \
         digits and `-`, at most {max} characters"
    );
    let help = match suggest_label(&s.value, max) {
        Some(fixed) if fixed != s.value => format!("{why}; e.g. `{fixed}`"),
        _ => why,
    };
    let value = f.check(
        cx,
        new(&s.value),
        Code::Name,
        "not a valid name",
        help,
        |e| format!("`{}` {e}", s.value),
    )?;
    Some(Spanned::new(value, s.span))
}

/// The nearest valid DNS label: lowercased, other characters turned into `-`, trimmed to `max`.
fn suggest_label(s: &str, max: usize) -> Option<String> {
    let mapped: String = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(max)
        .collect();
    let fixed = mapped.trim_matches('-').to_owned();
    names::check_dns_label(&fixed, max).ok().map(|()| fixed)
}

/// `metadata.tags`: each a tag Nova keeps, and no more than a server has room for beside kos's own
/// (Nova refuses a server with more than 50; known here, it must not first fail at a create).
fn tags(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Vec<Tag>> {
    let read = list(cx, f, tag);
    if let Value::Seq(items) = &f.node.value
        && items.len() > names::USER_TAGS_MAX
    {
        return f.invalid(
            cx,
            Code::Tag,
            format!(
                "{} tags; the limit is {}",
                items.len(),
                names::USER_TAGS_MAX
            ),
            "too many tags",
            format!(
                "every server carries these tags, and Nova keeps at most {} on a server, of which \
                 kos uses up to {} itself; keep at most {}",
                names::NOVA_TAGS_PER_SERVER,
                names::KOS_SERVER_TAGS_MAX,
                names::USER_TAGS_MAX
            ),
        );
    }
    read
}

fn tag(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Tag> {
    let s = scalar(cx, f)?;
    let help = "Nova tags are at most 60 characters without `/` or `,`; keys starting `kos-` \
                (`kos-cluster=`, `kos-id=`, `kos-k8s=`, …) are kos's own";
    f.check(
        cx,
        Tag::new(&s.value),
        Code::Tag,
        "not a valid tag",
        help,
        |e| format!("tag `{}` {e}", s.value),
    )
}

/// The readable parts of `spec`.
struct SpecParts {
    kubernetes_version: KubernetesVersion,
    network: crate::spec::Network,
    api_endpoint: ApiEndpoint,
    control_plane: ControlPlane,
    node_pools: Vec<NodePool>,
    addons: Addons,
    service_load_balancers: ServiceLoadBalancers,
    ssh_public_key: Option<SshPublicKey>,
    mirrors: crate::spec::Mirrors,
    proxy: Option<crate::spec::Proxy>,
}

fn spec(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<SpecParts> {
    let m = Obj::new(
        cx,
        f,
        &[
            "kubernetesVersion",
            "network",
            "apiEndpoint",
            "controlPlane",
            "nodePools",
            "addons",
            "serviceLoadBalancers",
            "sshPublicKey",
            "mirrors",
            "proxy",
        ],
    )?;
    let kubernetes_version = match m.opt(cx, "kubernetesVersion", version) {
        Some(Some(v)) => Some(v),
        Some(None) => default_version(cx, &m),
        None => None,
    };
    let network = m.req(cx, "network", network::network);
    let control_plane = m.req(cx, "controlPlane", control_plane);
    // Without `apiEndpoint`: a public amphora load balancer, which works with any control-plane count.
    let default_endpoint = ApiEndpoint {
        kind: Spanned::new(
            EndpointKind::LoadBalancer {
                provider: LbProvider::Amphora,
            },
            m.at(),
        ),
        public: true,
        allowed_cidrs: Vec::new(),
        dns_name: None,
    };
    let api_endpoint = m.or(cx, "apiEndpoint", default_endpoint, api_endpoint);
    let node_pools = m.or(cx, "nodePools", Vec::new(), node_pools);
    let addons = m.or(cx, "addons", Addons::default(), addons);
    let service_load_balancers = m.or(
        cx,
        "serviceLoadBalancers",
        ServiceLoadBalancers::default(),
        service_load_balancers,
    );
    let ssh_public_key = m.opt(cx, "sshPublicKey", ssh_key);
    let mirrors = m.or(
        cx,
        "mirrors",
        crate::spec::Mirrors::default(),
        airgap::mirrors,
    );
    let proxy = m.opt(cx, "proxy", airgap::proxy);
    if let (Some(mirrors), Some(proxy)) = (&mirrors, &proxy) {
        airgap::check_unmirrored(cx, &m, mirrors, proxy.is_some());
    }

    if let (Some(cp), Some(ep)) = (&control_plane, &api_endpoint) {
        check_endpoint_fits_count(cx, cp, ep);
    }
    if let (Some(net), Some(cp), Some(pools)) = (&network, &control_plane, &node_pools) {
        let counts: Vec<Spanned<u32>> = std::iter::once(cp.count.map(ControlPlaneCount::get))
            .chain(pools.iter().map(|p| p.count))
            .collect();
        network::check_capacity(cx, net, &counts);
    }

    Some(SpecParts {
        kubernetes_version: kubernetes_version?,
        network: network?,
        api_endpoint: api_endpoint?,
        control_plane: control_plane?,
        node_pools: node_pools?,
        addons: addons?,
        service_load_balancers: service_load_balancers?,
        ssh_public_key: ssh_public_key?,
        mirrors: mirrors?,
        proxy: proxy?,
    })
}

fn lb_provider(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<LbProvider>> {
    choice(
        cx,
        f,
        &[("amphora", LbProvider::Amphora), ("ovn", LbProvider::Ovn)],
    )
}

fn service_load_balancers(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<ServiceLoadBalancers> {
    let m = Obj::new(cx, f, &["provider"])?;
    let provider = m.opt(cx, "provider", lb_provider)?;
    Some(ServiceLoadBalancers { provider })
}

fn version(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<KubernetesVersion> {
    let s = scalar(cx, f)?;
    let e = match KubernetesVersion::parse(s.value.trim()) {
        Ok(v) => return Some(v),
        Err(e) => e,
    };
    let newest =
        KubernetesVersion::default_release().map_or_else(|_| "1.x.y".into(), |v| v.to_string());
    let help = match (&e, &f.node.value) {
        (VersionError::Shape, Value::Float) => format!(
            "YAML reads `{}` as a number: write the full release in quotes, e.g. `\"{}.0\"`",
            s.value, s.value
        ),
        (VersionError::Shape, _) => format!("write a full release such as `{newest}`"),
        (VersionError::Unsupported { supported, .. }, _) => format!(
            "kos supports the three newest minor releases, {supported}: e.g. `{newest}`, the newest"
        ),
        _ => format!("e.g. `{newest}`"),
    };
    f.invalid(
        cx,
        Code::Version,
        format!("`{}` {e}", s.value),
        "unsupported version",
        help,
    )
}

/// No `kubernetesVersion`: kos's newest supported release, with a warning, because a newer kos would
/// otherwise pick a newer one for this spec.
fn default_version(cx: &mut Cx<'_>, m: &Obj<'_>) -> Option<KubernetesVersion> {
    match KubernetesVersion::default_release() {
        Ok(v) => {
            cx.push(
                Diagnostic::warning(
                    Code::Version,
                    m.path(),
                    format!("`kubernetesVersion` is not set: the cluster gets {v}, kos's newest supported release"),
                )
                .label(m.at(), "no kubernetesVersion")
                .help(format!(
                    "pin it, `kubernetesVersion: \"{v}\"`, so that a newer kos does not pick another release for this spec"
                )),
            );
            Some(v)
        }
        Err(e) => {
            cx.push(
                Diagnostic::error(Code::Version, m.path(), format!("the default release {e}"))
                    .label(m.at(), "no kubernetesVersion")
                    .help("set `kubernetesVersion`"),
            );
            None
        }
    }
}

fn api_endpoint(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<ApiEndpoint> {
    #[derive(Clone, Copy)]
    enum Type {
        LoadBalancer,
        FloatingIp,
    }
    let m = Obj::new(
        cx,
        f,
        &["type", "public", "allowedCIDRs", "provider", "dnsName"],
    )?;
    let kind = m.or(
        cx,
        "type",
        Spanned::new(Type::LoadBalancer, m.at()),
        |cx, f| {
            choice(
                cx,
                f,
                &[
                    ("loadBalancer", Type::LoadBalancer),
                    ("floatingIP", Type::FloatingIp),
                ],
            )
        },
    );
    let provider = m.opt(cx, "provider", lb_provider);
    let public = m.or(cx, "public", true, boolean);
    let allowed_cidrs = m.or(cx, "allowedCIDRs", Vec::new(), |cx, f| {
        list(cx, f, network::any_cidr)
    });
    let dns_name = m.opt(cx, "dnsName", |cx, f| {
        let s = scalar(cx, f)?;
        let help = "write a DNS name such as `api.example.com`; it goes into the API certificate";
        let name = DnsName::new(s.value.trim_end_matches('.'));
        f.check(cx, name, Code::Name, "not a DNS name", help, |e| {
            format!("`{}` {e}", s.value)
        })
    });

    let kind = match (kind?, provider?) {
        (
            t @ Spanned {
                value: Type::FloatingIp,
                ..
            },
            Some(p),
        ) => {
            cx.push(
                Diagnostic::error(
                    Code::Conflict,
                    &format!("{}.provider", m.path()),
                    format!(
                        "provider `{}` is for load balancers, but the endpoint is a floating IP",
                        p.value.as_str()
                    ),
                )
                .label(p.span, "Octavia provider")
                .label(t.span, "no load balancer with this type")
                .help("remove `provider`, or use `type: loadBalancer`"),
            );
            return None;
        }
        (t, provider) => t.map(|t| match t {
            Type::LoadBalancer => EndpointKind::LoadBalancer {
                provider: provider.map_or(LbProvider::Amphora, |p| p.value),
            },
            Type::FloatingIp => EndpointKind::FloatingIp,
        }),
    };
    Some(ApiEndpoint {
        kind,
        public: public?,
        allowed_cidrs: allowed_cidrs?,
        dns_name: dns_name?,
    })
}

fn check_endpoint_fits_count(cx: &mut Cx<'_>, cp: &ControlPlane, ep: &ApiEndpoint) {
    if ep.kind.value == EndpointKind::FloatingIp && cp.count.value != ControlPlaneCount::One {
        cx.push(
            Diagnostic::error(
                Code::Conflict,
                "spec.apiEndpoint.type",
                format!(
                    "a floating-IP endpoint reaches one server, but there are {} control planes",
                    cp.count.get()
                ),
            )
            .label(ep.kind.span, "one server only")
            .label(cp.count.span, "control planes")
            .help("use `type: loadBalancer` with several control planes, or `count: 1`"),
        );
    }
    if ep.kind.value == EndpointKind::FloatingIp
        && let Some(surge) = cp.max_surge.filter(|s| s.value > 0)
    {
        cx.push(
            Diagnostic::error(
                Code::Conflict,
                "spec.controlPlane.maxSurge",
                "a floating-IP endpoint is its one server's port: no second control plane can join \
                 behind it",
            )
            .label(ep.kind.span, "one server only")
            .label(surge.span, "a second control plane")
            .help("use `type: loadBalancer` to replace the control plane without downtime, or `maxSurge: 0`"),
        );
    }
}

fn control_plane(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<ControlPlane> {
    let m = Obj::new(
        cx,
        f,
        &[
            "count",
            "flavor",
            "image",
            "bootVolume",
            "availabilityZones",
            "serverGroupPolicy",
            "maxSurge",
            "healthCheck",
        ],
    )?;
    let count = m.req(cx, "count", control_plane_count);
    let health = m.or(
        cx,
        "healthCheck",
        HealthCheck::default(),
        health::health_check,
    );
    let machine = machine(cx, &m);
    let policy = m.opt(cx, "serverGroupPolicy", server_group_policy);
    let max_surge = m.opt(cx, "maxSurge", |cx, f| {
        integer(
            cx,
            f,
            0..=1,
            Code::InvalidValue,
            "1: a replacement joins a new control plane before the old one leaves; 0: the old one \
             leaves first (needs 3 control planes)",
        )
    });
    let count = count?;
    let default_policy = if count.value == ControlPlaneCount::One {
        ServerGroupPolicy::None
    } else {
        ServerGroupPolicy::AntiAffinity
    };
    Some(ControlPlane {
        count,
        machine: machine?,
        server_group_policy: policy?.unwrap_or(default_policy),
        max_surge: max_surge?,
        health_check: health?,
    })
}

fn control_plane_count(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<ControlPlaneCount>> {
    let Value::Int(n) = f.node.value else {
        return f.wrong_type(cx, "a whole number");
    };
    if let Some(c) = u32::try_from(n).ok().and_then(ControlPlaneCount::from_u32) {
        return Some(Spanned::new(c, f.span()));
    }
    let (why, fix) = match n {
        ..=0 => ("a cluster needs at least one control plane", "1"),
        n if n % 2 == 0 && n < 6 => (
            "an even number of etcd members tolerates no more failures than one fewer",
            if n == 2 { "1 or 3" } else { "3 or 5" },
        ),
        _ => (
            "more etcd members make every write slower; 5 already tolerates two failures",
            "5",
        ),
    };
    f.invalid(
        cx,
        Code::ControlPlaneCount,
        format!("{n} control planes: {why}"),
        "must be 1, 3 or 5",
        format!("use {fix}"),
    )
}

/// The server fields shared by the control plane and the pools, read from the same mapping.
fn machine(cx: &mut Cx<'_>, m: &Obj<'_>) -> Option<Machine> {
    let flavor = m.req(cx, "flavor", |cx, f| {
        string(cx, f).map(|s| s.map(|s| s.trim().to_owned()))
    });
    let image = m.req(cx, "image", image);
    let boot_volume = m.opt(cx, "bootVolume", boot_volume);
    let zones = m.or(cx, "availabilityZones", Vec::new(), |cx, f| {
        list(cx, f, string)
    });
    Some(Machine {
        flavor: flavor?,
        image: image?,
        boot_volume: boot_volume?,
        availability_zones: zones?,
    })
}

fn image(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<ImageRef>> {
    if let Value::Map(_) = f.node.value {
        let m = Obj::new(cx, f, &["tags"])?;
        let tags = m.req(cx, "tags", |cx, f| list(cx, f, string))?;
        if tags.is_empty() {
            return f.invalid(
                cx,
                Code::InvalidValue,
                "`tags` is empty, which selects every image",
                "no tags",
                "list the tags that mark exactly one image",
            );
        }
        return Some(Spanned::new(
            ImageRef::Tags(tags.into_iter().map(|t| t.value).collect()),
            f.span(),
        ));
    }
    match f.node.value {
        Value::Str(_) | Value::Int(_) | Value::Float => {
            network::resource_ref(cx, f).map(|r| r.map(ImageRef::Ref))
        }
        _ => f.wrong_type(cx, "an image name or id, or `{tags: [...]}`"),
    }
}

fn boot_volume(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<BootVolume> {
    let m = Obj::new(cx, f, &["sizeGB", "type", "availabilityZone"])?;
    let size = m.req(cx, "sizeGB", |cx, f| {
        integer(
            cx,
            f,
            BootVolume::MIN_GB..=BootVolume::MAX_GB,
            Code::BootVolume,
            "a node needs at least 10 GB for the OS and images; more than 2048 GB is likely a unit mistake",
        )
    });
    let volume_type = m.opt(cx, "type", string);
    // Cinder's zone, which need not be a compute zone: preflight checks it against Cinder's list.
    let zone = m.opt(cx, "availabilityZone", |cx, f| {
        string(cx, f).map(|s| s.map(|s| s.trim().to_owned()))
    });
    Some(BootVolume {
        size_gb: size?.value,
        volume_type: volume_type?,
        availability_zone: zone?,
    })
}

fn server_group_policy(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<ServerGroupPolicy> {
    choice(
        cx,
        f,
        &[
            ("anti-affinity", ServerGroupPolicy::AntiAffinity),
            ("soft-anti-affinity", ServerGroupPolicy::SoftAntiAffinity),
            ("affinity", ServerGroupPolicy::Affinity),
            ("none", ServerGroupPolicy::None),
        ],
    )
    .map(|p| p.value)
}

fn node_pools(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Vec<NodePool>> {
    let pools = list(cx, f, node_pool);
    // Uniqueness is checked on the names as written, even when another field of a pool is broken.
    let Value::Seq(items) = &f.node.value else {
        return pools;
    };
    let mut seen: BTreeMap<&str, SourceSpan> = BTreeMap::new();
    let mut unique = true;
    for (i, item) in items.iter().enumerate() {
        let Value::Map(entries) = &item.value else {
            continue;
        };
        let name = entries.iter().find(|(k, _)| key_text(cx, k) == "name");
        let Some((
            _,
            Node {
                value: Value::Str(text),
                span,
            },
        )) = name
        else {
            continue;
        };
        if let Some(why) = reserved_pool_name(text) {
            unique = false;
            let renamed = format!("pool-{text}");
            let example = if renamed.len() <= names::POOL_NAME_MAX {
                format!(" (e.g. `{renamed}`)")
            } else {
                String::new()
            };
            cx.push(
                Diagnostic::error(
                    Code::ReservedName,
                    &format!("{}[{i}].name", f.path),
                    format!("pool name `{text}` is reserved: {why}"),
                )
                .label(*span, "reserved by kos")
                .help(format!(
                    "a pool's objects get the ids `<pool>-<n>`, `port-<pool>-<n>`, `vol-<pool>-<n>` and \
                     `sgroup-<pool>`, which must not be those of the control plane (`cp`) or of another \
                     pool; rename it{example}"
                )),
            );
        }
        if let Some(first) = seen.get(text.as_str()) {
            unique = false;
            cx.push(
                Diagnostic::error(
                    Code::DuplicateName,
                    &format!("{}[{i}].name", f.path),
                    format!("pool name `{text}` is used twice"),
                )
                .label(*span, "second pool with this name")
                .label(*first, "first one")
                .help("pool names become part of server names and must be unique; rename one"),
            );
        } else {
            seen.insert(text, *span);
        }
    }
    pools.filter(|_| unique)
}

/// Why a pool name would give the pool's objects the logical ids of other objects (the desired graph needs
/// them unique); `None` when it is free. A pool's ids are `<pool>-<n>`, `port-<pool>-<n>`, `vol-<pool>-<n>`
/// and `sgroup-<pool>`; the fixed ids (`network`, `api-lb`, `sg-cp`…) end in no digit, and `<pool>-<n>`
/// splits one way only, so these are the only collisions.
fn reserved_pool_name(name: &str) -> Option<String> {
    let taken = |what: &str, id: &str| {
        Some(format!(
            "its servers (`{name}-0`…) would take the ids of the {what} (`{id}`…)"
        ))
    };
    if name == "cp" {
        return Some("the control plane's servers are `cp-0`, `cp-1`…".into());
    }
    if let Some(other) = name.strip_prefix("port-") {
        return taken(&format!("ports of `{other}`"), &format!("port-{other}-0"));
    }
    if let Some(other) = name.strip_prefix("vol-") {
        return taken(
            &format!("boot volumes of `{other}`"),
            &format!("vol-{other}-0"),
        );
    }
    let other = name.strip_prefix("sgroup-")?;
    taken(
        &format!("server groups of pools named `{other}-<n>`"),
        &format!("sgroup-{other}-0"),
    )
}

fn node_pool(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<NodePool> {
    let m = Obj::new(
        cx,
        f,
        &[
            "name",
            "count",
            "flavor",
            "image",
            "bootVolume",
            "availabilityZones",
            "labels",
            "taints",
            "serverGroupPolicy",
            "maxUnavailable",
            "maxSurge",
            "healthCheck",
            "autoscaling",
        ],
    )?;
    let health = m.or(
        cx,
        "healthCheck",
        HealthCheck::default(),
        health::health_check,
    );
    let name = m.req(cx, "name", |cx, f| {
        name_value(cx, f, PoolName::new, "pool name", names::POOL_NAME_MAX)
    });
    let max_surge = m.or(cx, "maxSurge", 0, |cx, f| {
        integer(
            cx,
            f,
            0..=NodePool::MAX_COUNT,
            Code::InvalidValue,
            "how many successors join before the nodes they replace leave: 0 to 500 (default 0: \
             replaced in place)",
        )
        .map(|n| n.value)
    });
    let max_unavailable = m.opt(cx, "maxUnavailable", |cx, f| {
        integer(
            cx,
            f,
            0..=NodePool::MAX_COUNT,
            Code::InvalidValue,
            "how many of the pool's nodes a replacement takes down at once: 0 to 500 (default 1, or \
             0 with a maxSurge)",
        )
    });
    // Both 0 would replace nothing, ever (Cluster API refuses the same).
    let max_unavailable = match (max_unavailable, max_surge) {
        (Some(Some(u)), Some(0)) if u.value == 0 => {
            cx.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    &format!("{}.maxUnavailable", m.path()),
                    "maxUnavailable 0 with maxSurge 0: no node could ever be replaced",
                )
                .label(u.span, "nothing down")
                .help("set `maxSurge: 1` (a successor joins first) or `maxUnavailable: 1`"),
            );
            None
        }
        (Some(u), Some(surge)) => Some(u.map_or(u32::from(surge == 0), |u| u.value)),
        _ => None,
    };
    let count = m.req(cx, "count", |cx, f| {
        integer(
            cx,
            f,
            0..=NodePool::MAX_COUNT,
            Code::InvalidValue,
            "a pool has 0 to 500 nodes; split larger ones into several pools",
        )
    });
    let autoscaling = m.opt(cx, "autoscaling", autoscaling);
    let autoscaling = match (&count, autoscaling) {
        (Some(count), Some(Some(a))) => count_within(cx, &m, *count, a).map(Some),
        (_, a) => a.map(|a| a.map(|a| a.bounds())),
    };
    let machine = machine(cx, &m);
    let labels = m.or(cx, "labels", BTreeMap::new(), labels);
    let taints = m.or(cx, "taints", Vec::new(), |cx, f| list(cx, f, taint));
    let policy = m.or(
        cx,
        "serverGroupPolicy",
        ServerGroupPolicy::SoftAntiAffinity,
        server_group_policy,
    );
    Some(NodePool {
        name: name?,
        count: count?,
        machine: machine?,
        labels: labels?,
        taints: taints?,
        server_group_policy: policy?,
        max_unavailable: max_unavailable?,
        max_surge: max_surge?,
        health_check: health?,
        autoscaling: autoscaling?,
    })
}

/// A pool's `autoscaling` as written: its bounds with their places, for the rule on `count`.
struct AutoscalingRead {
    min: Spanned<u32>,
    max: Spanned<u32>,
}

impl AutoscalingRead {
    fn bounds(&self) -> Autoscaling {
        Autoscaling {
            min: self.min.value,
            max: self.max.value,
        }
    }
}

/// `autoscaling: {min, max}`: 0–500 and 1–500, `min` at most `max`.
fn autoscaling(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<AutoscalingRead> {
    let m = Obj::new(cx, f, &["min", "max"])?;
    let min = m.req(cx, "min", |cx, f| {
        integer(
            cx,
            f,
            0..=NodePool::MAX_COUNT,
            Code::InvalidValue,
            "the fewest nodes the cluster-autoscaler scales the pool down to: 0 to 500",
        )
    });
    let max = m.req(cx, "max", |cx, f| {
        integer(
            cx,
            f,
            1..=NodePool::MAX_COUNT,
            Code::InvalidValue,
            "the most nodes the cluster-autoscaler scales the pool up to: 1 to 500; to keep the \
             pool empty, remove `autoscaling` and set `count: 0`",
        )
    });
    let (min, max) = (min?, max?);
    if min.value > max.value {
        cx.push(
            Diagnostic::error(
                Code::InvalidValue,
                &format!("{}.min", m.path()),
                format!("min {} is above max {}", min.value, max.value),
            )
            .label(min.span, "the fewest nodes")
            .label(max.span, "the most nodes")
            .help(format!(
                "set `min` to at most {}, or `max` to at least {}",
                max.value, min.value
            )),
        );
        return None;
    }
    Some(AutoscalingRead { min, max })
}

/// With `autoscaling`, `count` is the pool's current target size: within `min..=max`.
fn count_within(
    cx: &mut Cx<'_>,
    m: &Obj<'_>,
    count: Spanned<u32>,
    a: AutoscalingRead,
) -> Option<Autoscaling> {
    const WHY: &str = "with `autoscaling`, `count` is the pool's current target size, which the \
                       cluster-autoscaler keeps within `min` and `max`";
    let (bound, label, help) = if count.value > a.max.value {
        (
            format!("above autoscaling.max {}", a.max.value),
            (a.max.span, "the most nodes"),
            format!(
                "{WHY}: set `count` to at most {}, or `max` to at least {}",
                a.max.value, count.value
            ),
        )
    } else if count.value < a.min.value {
        (
            format!("below autoscaling.min {}", a.min.value),
            (a.min.span, "the fewest nodes"),
            format!(
                "{WHY}: set `count` to at least {}, or `min` to at most {}",
                a.min.value, count.value
            ),
        )
    } else {
        return Some(a.bounds());
    };
    cx.push(
        Diagnostic::error(
            Code::InvalidValue,
            &format!("{}.count", m.path()),
            format!("count {} is {bound}", count.value),
        )
        .label(count.span, "the pool's target size")
        .label(label.0, label.1)
        .help(help),
    );
    None
}

const LABEL_HELP: &str = "label keys are `[prefix/]name` (name: at most 63 of letters, digits, `-`, `_`, `.`, \
                          starting and ending alphanumeric; prefix: a lowercase DNS name); values follow the \
                          name rule or are empty";

fn labels(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<BTreeMap<LabelKey, LabelValue>> {
    // Label keys are free-form: read the mapping directly instead of through a schema.
    let Value::Map(entries) = &f.node.value else {
        return f.wrong_type(cx, "a mapping of label keys to values");
    };
    let mut out = Some(BTreeMap::new());
    for (k, v) in entries {
        let key_str = key_text(cx, k);
        let path = format!("{}.{key_str}", f.path);
        let key = LabelKey::new(&key_str).map_err(|e| {
            cx.push(
                Diagnostic::error(Code::Label, &path, format!("label key `{key_str}` {e}"))
                    .label(k.span, "invalid label key")
                    .help(LABEL_HELP),
            );
        });
        if let Ok(key) = &key
            && !names::kubelet_may_set(key.as_str())
        {
            cx.push(
                Diagnostic::warning(
                    Code::Label,
                    &path,
                    format!("the kubelet may not set `{key_str}` on its own node"),
                )
                .label(k.span, "restricted namespace")
                .help(
                    "labels under `kubernetes.io` and `k8s.io` are refused by the NodeRestriction admission \
                     plugin (except `node.kubernetes.io/` and a few well-known keys); use your own prefix, \
                     e.g. `example.com/role`",
                ),
            );
        }
        let field = Field {
            path: path.clone(),
            node: v,
            at: k.span,
        };
        let value = match &v.value {
            Value::Null => Some(String::new()),
            _ => scalar(cx, &field).map(|s| s.value),
        }
        .and_then(|s| match LabelValue::new(&s) {
            Ok(v) => Some(v),
            Err(e) => field.invalid(
                cx,
                Code::Label,
                format!("label value `{s}` {e}"),
                "invalid label value",
                LABEL_HELP,
            ),
        });
        match (key, value, &mut out) {
            (Ok(k), Some(v), Some(map)) => {
                map.insert(k, v);
            }
            _ => out = None,
        }
    }
    out
}

const TAINT_HELP: &str = "write `key=value:Effect` or `key:Effect`, or `{key, value, effect}`; the effect is \
                          `NoSchedule`, `PreferNoSchedule` or `NoExecute`";

fn taint(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Taint> {
    type Part = Spanned<String>;
    let (key, value, effect): (Part, Option<Part>, Part) = match &f.node.value {
        Value::Str(s) => {
            let part = |t: &str| Spanned::new(t.to_owned(), f.span());
            let Some((kv, effect)) = s.rsplit_once(':') else {
                return f.invalid(
                    cx,
                    Code::Taint,
                    format!("taint `{s}` has no effect"),
                    "missing `:Effect`",
                    TAINT_HELP,
                );
            };
            match kv.split_once('=') {
                Some((k, v)) => (part(k), Some(part(v)), part(effect)),
                None => (part(kv), None, part(effect)),
            }
        }
        Value::Map(_) => {
            let m = Obj::new(cx, f, &["key", "value", "effect"])?;
            let key = m.req(cx, "key", scalar);
            let value = m.opt(cx, "value", scalar);
            let effect = m.req(cx, "effect", scalar);
            (key?, value?, effect?)
        }
        _ => return f.wrong_type(cx, "a taint (`key=value:Effect` or a mapping)"),
    };
    let problem = |cx: &mut Cx<'_>, at: &Part, message: String, help: String| -> Option<Taint> {
        cx.push(
            Diagnostic::error(Code::Taint, &f.path, message)
                .label(at.span, "invalid taint")
                .help(help),
        );
        None
    };
    let effects = [
        ("NoSchedule", TaintEffect::NoSchedule),
        ("PreferNoSchedule", TaintEffect::PreferNoSchedule),
        ("NoExecute", TaintEffect::NoExecute),
    ];
    let Some(&(_, effect_value)) = effects.iter().find(|(n, _)| *n == effect.value) else {
        let names: Vec<&str> = effects.iter().map(|(n, _)| *n).collect();
        let help = read::did_you_mean(&effect.value, &names)
            .map_or(TAINT_HELP.to_owned(), |n| format!("did you mean `{n}`?"));
        let message = format!(
            "taint effect `{}` is not one of {}",
            effect.value,
            read::backticked(&names)
        );
        return problem(cx, &effect, message, help);
    };
    let key_value = match LabelKey::new(&key.value) {
        Ok(k) => k,
        Err(e) => {
            let message = format!("taint key `{}` {e}", key.value);
            return problem(cx, &key, message, TAINT_HELP.to_owned());
        }
    };
    let value = match value {
        Some(v) => match LabelValue::new(&v.value) {
            Ok(lv) => Some(lv),
            Err(e) => {
                let message = format!("taint value `{}` {e}", v.value);
                return problem(cx, &v, message, TAINT_HELP.to_owned());
            }
        },
        None => None,
    };
    Some(Taint {
        key: key_value,
        value,
        effect: effect_value,
    })
}

fn addons(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Addons> {
    let m = Obj::new(
        cx,
        f,
        &[
            "cni",
            "ccm",
            "csi",
            "cniManifest",
            "credentialLifetimeDays",
            "credentialAccessRules",
            "csiAvailabilityZone",
        ],
    )?;
    let cni = m.or(cx, "cni", Cni::default(), |cx, f| {
        choice(
            cx,
            f,
            &[
                ("calico", Cni::Calico),
                ("cilium", Cni::Cilium),
                ("flannel", Cni::Flannel),
                ("kube-router", Cni::KubeRouter),
            ],
        )
        .map(|c| c.value)
    });
    let ccm = m.or(cx, "ccm", Ccm::default(), |cx, f| match &f.node.value {
        Value::Map(_) => kos_image(cx, f, "kos-ccm").map(|image| Ccm::Kos { image }),
        _ => {
            no_bare_kos(cx, f, "ccm", "kos-ccm")?;
            choice(cx, f, &[("upstream", ())]).map(|_| Ccm::Upstream)
        }
    });
    let csi = m.or(cx, "csi", Csi::default(), |cx, f| match &f.node.value {
        Value::Map(_) => kos_image(cx, f, "kos-csi").map(|image| Csi::Kos { image }),
        _ => {
            no_bare_kos(cx, f, "csi", "kos-csi")?;
            // `choice` takes values that are Copy; `Csi` carries kos-csi's image.
            #[derive(Clone, Copy)]
            enum Named {
                Cinder,
                None,
            }
            choice(cx, f, &[("cinder", Named::Cinder), ("none", Named::None)]).map(|c| {
                match c.value {
                    Named::Cinder => Csi::Cinder,
                    Named::None => Csi::None,
                }
            })
        }
    });
    let cni_manifest = m.opt(cx, "cniManifest", cni_manifest);
    let credential_lifetime_days = m.opt(cx, "credentialLifetimeDays", |cx, f| {
        integer(
            cx,
            f,
            crate::credential::LIFETIME_DAYS,
            Code::InvalidValue,
            "the cloud controller's application credential lives this many days (default 90); \
             `kos up` rotates it once a third is left, so it must run at least that often",
        )
    });
    // A boolean only: the rules themselves are kos's (access_rules.rs), not the spec's.
    let credential_access_rules = m.or(cx, "credentialAccessRules", false, boolean);
    // One of Cinder's zones (not Nova's): preflight checks it against Cinder's list.
    let csi_availability_zone = m.opt(cx, "csiAvailabilityZone", |cx, f| {
        string(cx, f).map(|s| s.map(|s| s.trim().to_owned()))
    });
    if let (Some(cni), Some(None)) = (&cni, &cni_manifest) {
        check_cni_pinned(cx, &m, *cni);
    }
    if let (Some(true), Some(ccm), Some(csi)) = (&credential_access_rules, &ccm, &csi) {
        check_rules_fit(cx, &m, ccm, csi);
    }
    Some(Addons {
        cni: cni?,
        ccm: ccm?,
        csi: csi?,
        cni_manifest: cni_manifest?,
        credential_lifetime_days: credential_lifetime_days?,
        credential_access_rules: credential_access_rules?,
        csi_availability_zone: csi_availability_zone?,
    })
}

/// `{kos: {image: <reference>}}`: one of kos's own components (kos-ccm, kos-csi) from an image the
/// user built and hosts (kos publishes none), checked as the bootstrap checks it before it renders a
/// manifest with it.
fn kos_image(cx: &mut Cx<'_>, f: &Field<'_>, component: &str) -> Option<String> {
    let m = Obj::new(cx, f, &["kos"])?;
    m.req(cx, "kos", |cx, f| {
        let k = Obj::new(cx, f, &["image"])?;
        k.req(cx, "image", |cx, f| {
            let image = string(cx, f)?;
            if kos_bootstrap::input::is_image_ref(&image.value) {
                return Some(image.value);
            }
            f.invalid(
                cx,
                Code::InvalidValue,
                format!("`{}` is not a container image reference", image.value),
                "not an image reference",
                format!(
                    "write `registry/path/name:tag` (letters, digits and `./:_@-`), \
                     e.g. `registry.example.com/kos/{component}:0.1.0`"
                ),
            )
        })
    })
}

/// A bare `kos` where the component's image must be given: refused saying how to give it, rather
/// than as an unknown value.
fn no_bare_kos(cx: &mut Cx<'_>, f: &Field<'_>, field: &str, component: &str) -> Option<()> {
    if !matches!(&f.node.value, Value::Str(s) if s == "kos") {
        return Some(());
    }
    f.invalid(
        cx,
        Code::InvalidValue,
        format!("`{field}: kos` needs the image {component} runs from: kos publishes none"),
        "no image",
        format!(
            "build and push it (`scripts/image {component} out/{component}`, \
             `scripts/image-push out/{component} {component} <reference>`), then write \
             `{field}: {{kos: {{image: <reference>}}}}`"
        ),
    )
}

/// A CNI whose manifest kos cannot vouch for (no verified checksum in its pins table) is refused here,
/// before anything is created, rather than by the first control plane once everything exists.
/// The access rules list kos-ccm's and kos-csi's calls only: the upstream CCM and cinder-csi call
/// other paths (and microversions), so with them the credential would be refused on their first
/// request, on the nodes. Refused here instead.
fn check_rules_fit(cx: &mut Cx<'_>, m: &Obj<'_>, ccm: &Ccm, csi: &Csi) {
    let mut upstream = Vec::new();
    if matches!(ccm, Ccm::Upstream) {
        upstream.push("ccm: upstream (the default)");
    }
    if matches!(csi, Csi::Cinder) {
        upstream.push("csi: cinder (the default)");
    }
    if upstream.is_empty() {
        return;
    }
    let span = m.key_span(cx, "credentialAccessRules").unwrap_or(m.at());
    cx.push(
        Diagnostic::error(
            Code::InvalidValue,
            &format!("{}.credentialAccessRules", m.path()),
            format!(
                "access rules list only kos-ccm's and kos-csi's requests, and this cluster runs {}: its credential would be refused on their first request",
                upstream.join(" and ")
            ),
        )
        .label(span, "rules for kos's components only")
        .help(
            "run kos's own components (`ccm: {kos: {image: …}}`, and `csi: {kos: {image: …}}` or `csi: none`), \
             or drop credentialAccessRules",
        ),
    );
}

fn check_cni_pinned(cx: &mut Cx<'_>, m: &Obj<'_>, cni: Cni) {
    let key = cni.key();
    let verified = kos_bootstrap::addons::Pins::builtin().is_ok_and(|p| {
        p.cni
            .get(key)
            .is_some_and(kos_bootstrap::addons::CniPin::vouched)
    });
    if verified {
        return;
    }
    let span = m.key_span(cx, "cni").unwrap_or(m.at());
    cx.push(
        Diagnostic::error(
            Code::Unpinned,
            &format!("{}.cni", m.path()),
            format!("kos has no verified manifest for CNI `{key}`: its first control plane would refuse to install it"),
        )
        .label(span, "no verified manifest")
        .help(format!(
            "give the manifest you vouch for, `cniManifest: {{url: https://…, sha256: <sha256sum of that URL's content>}}` \
             (for {key}, render one with its CLI or Helm chart and host it), or choose calico, flannel or kube-router"
        )),
    );
}

fn cni_manifest(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<CniManifest> {
    let m = Obj::new(cx, f, &["url", "sha256"])?;
    let url = m.req(cx, "url", |cx, f| {
        let s = string(cx, f)?;
        if !s.value.starts_with("https://") || s.value.len() <= "https://".len() {
            return f.invalid(
                cx,
                Code::InvalidValue,
                format!("`{}` is not an https:// URL", s.value),
                "not https",
                "the first control plane downloads it: give an https:// URL (it is verified by sha256 too)",
            );
        }
        Some(s.value)
    });
    let sha256 = m.req(cx, "sha256", |cx, f| {
        let s = string(cx, f)?;
        let ok = s.value.len() == 64
            && s.value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !ok {
            return f.invalid(
                cx,
                Code::InvalidValue,
                format!("`{}` is not a sha256 (64 lowercase hex digits)", s.value),
                "not a sha256",
                "use the output of `curl -fsSL <url> | sha256sum` for the exact URL given",
            );
        }
        Some(s.value)
    });
    Some(CniManifest {
        url: url?,
        sha256: sha256?,
    })
}

fn ssh_key(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<SshPublicKey> {
    let s = string(cx, f)?;
    let key = SshPublicKey::parse(&s.value);
    let help = match key {
        Err(SshKeyError::Pem) => {
            "never put a private key here: paste the `.pub` file, e.g. `~/.ssh/id_ed25519.pub`"
        }
        _ => "paste one line of a `.pub` file: `ssh-ed25519 AAAA... comment`",
    };
    f.check(
        cx,
        key,
        Code::SshKey,
        "not an OpenSSH public key",
        help,
        |e| format!("the key {e}"),
    )
}
