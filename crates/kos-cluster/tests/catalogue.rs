//! The examples load cleanly, and a catalogue of malformed specs each yields its specific diagnostic at its line.

use kos_cluster::{Code, Diagnostic, Report, Severity, load};

/// A valid spec; every case below edits it. Line numbers in the table refer to the edited text.
const BASE: &str = r#"apiVersion: kos.dev/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  kubernetesVersion: "1.36.4"
  network:
    create:
      cidr: 10.0.0.0/24
  apiEndpoint:
    type: loadBalancer
  controlPlane:
    count: 3
    flavor: m1.medium
    image: ubuntu-24.04
  nodePools:
    - name: workers
      count: 2
      flavor: m1.medium
      image: ubuntu-24.04
"#;

/// Applies `(from, to)` replacements to [`BASE`]; each `from` must occur exactly once.
fn edit(edits: &[(&str, &str)]) -> String {
    edits.iter().fold(BASE.to_owned(), |text, (from, to)| {
        assert_eq!(text.matches(from).count(), 1, "`{from}` must occur once");
        text.replacen(from, to, 1)
    })
}

fn all_diagnostics(text: &str) -> (Report, bool) {
    match load("cluster.yaml", text) {
        Ok(loaded) => (loaded.warnings, true),
        Err(report) => (report, false),
    }
}

fn primary_line(report: &Report, d: &Diagnostic) -> usize {
    let span = d
        .primary_span()
        .expect("every diagnostic has a primary label");
    report.line_col(span.offset()).0
}

struct Case {
    name: &'static str,
    edits: &'static [(&'static str, &'static str)],
    code: Code,
    message: &'static str,
    line: usize,
    help: &'static str,
}

const POOL_TAIL: &str = "      image: ubuntu-24.04\n";
const CP_IMAGE: &str = "    image: ubuntu-24.04\n  nodePools";

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { name: "unknown field with suggestion", edits: &[("  nodePools:", "  nodePool:")],
        code: Code::UnknownField, message: "spec.nodePool: unknown field", line: 16, help: "did you mean `nodePools`?" },
    Case { name: "unknown field, other case", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    podCidr: 10.1.0.0/16\n")],
        code: Code::UnknownField, message: "spec.network.podCidr", line: 10, help: "did you mean `podCIDR`?" },
    Case { name: "kubernetes version too old", edits: &[("\"1.36.4\"", "\"1.27.3\"")],
        code: Code::Version, message: "outside the supported releases (1.34, 1.35, 1.36)", line: 6, help: "kos supports the three newest minor releases, 1.34, 1.35, 1.36: e.g. `1.36.4`, the newest" },
    Case { name: "kubernetes version a minor ahead", edits: &[("\"1.36.4\"", "\"1.37.0\"")],
        code: Code::Version, message: "`1.37.0` is outside the supported releases", line: 6, help: "e.g. `1.36.4`" },
    Case { name: "no kubernetes version (warning)", edits: &[("  kubernetesVersion: \"1.36.4\"\n", "")],
        code: Code::Version, message: "`kubernetesVersion` is not set: the cluster gets 1.36.4", line: 5, help: "pin it, `kubernetesVersion: \"1.36.4\"`" },
    Case { name: "cilium without a pinned manifest", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n  addons:\n    cni: cilium\n")],
        code: Code::Unpinned, message: "spec.addons.cni: kos has no verified manifest for CNI `cilium`", line: 22, help: "cniManifest: {url: https://" },
    Case { name: "unknown service load balancer provider", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n  serviceLoadBalancers:\n    provider: octavia\n")],
        code: Code::InvalidValue, message: "spec.serviceLoadBalancers.provider", line: 22, help: "" },
    Case { name: "kubernetes version read as a number", edits: &[("\"1.36.4\"", "1.30")],
        code: Code::Version, message: "`1.30` is not a version", line: 6, help: "YAML reads `1.30` as a number" },
    Case { name: "kubernetes version with pre-release", edits: &[("\"1.36.4\"", "v1.32.0-rc.1")],
        code: Code::Version, message: "not a version of the form `1.MINOR.PATCH`", line: 6, help: "" },
    Case { name: "even control-plane count", edits: &[("count: 3", "count: 2")],
        code: Code::ControlPlaneCount, message: "2 control planes: an even number", line: 13, help: "use 1 or 3" },
    Case { name: "zero control planes", edits: &[("count: 3", "count: 0")],
        code: Code::ControlPlaneCount, message: "at least one control plane", line: 13, help: "" },
    Case { name: "seven control planes", edits: &[("count: 3", "count: 7")],
        code: Code::ControlPlaneCount, message: "7 control planes", line: 13, help: "use 5" },
    Case { name: "floating IP with three control planes", edits: &[("type: loadBalancer", "type: floatingIP")],
        code: Code::Conflict, message: "floating-IP endpoint reaches one server, but there are 3", line: 11, help: "type: loadBalancer" },
    Case { name: "ovn provider with floating IP", edits: &[("type: loadBalancer", "type: floatingIP\n    provider: ovn"), ("count: 3", "count: 1")],
        code: Code::Conflict, message: "provider `ovn` is for load balancers", line: 12, help: "remove `provider`" },
    Case { name: "surge behind a floating IP", edits: &[("type: loadBalancer", "type: floatingIP"), ("count: 3", "count: 1\n    maxSurge: 1")],
        code: Code::Conflict, message: "no second control plane can join behind it", line: 11, help: "`maxSurge: 0`" },
    Case { name: "control-plane surge of two", edits: &[("count: 3", "count: 3\n    maxSurge: 2")],
        code: Code::InvalidValue, message: "2", line: 14, help: "1: a replacement joins a new control plane" },
    Case { name: "a pool that can replace nothing", edits: &[("      image: ubuntu-24.04\n", "      image: ubuntu-24.04\n      maxUnavailable: 0\n")],
        code: Code::InvalidValue, message: "maxUnavailable 0 with maxSurge 0", line: 21, help: "`maxSurge: 1`" },
    Case { name: "a pool's surge out of range", edits: &[("      image: ubuntu-24.04\n", "      image: ubuntu-24.04\n      maxSurge: 501\n")],
        code: Code::InvalidValue, message: "501", line: 21, help: "0 to 500" },
    Case { name: "a pool's count above its autoscaling max", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 0, max: 1}\n")],
        code: Code::InvalidValue, message: "spec.nodePools[0].count: count 2 is above autoscaling.max 1", line: 18, help: "set `count` to at most 1, or `max` to at least 2" },
    Case { name: "a pool's count below its autoscaling min", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 3, max: 10}\n")],
        code: Code::InvalidValue, message: "spec.nodePools[0].count: count 2 is below autoscaling.min 3", line: 18, help: "set `count` to at least 3, or `min` to at most 2" },
    Case { name: "an autoscaling min above its max", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling:\n        min: 5\n        max: 3\n")],
        code: Code::InvalidValue, message: "spec.nodePools[0].autoscaling.min: min 5 is above max 3", line: 22, help: "set `min` to at most 3, or `max` to at least 5" },
    Case { name: "an autoscaling max of 0", edits: &[("count: 2", "count: 0"), (POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 0, max: 0}\n")],
        code: Code::InvalidValue, message: "spec.nodePools[0].autoscaling.max: 0 is out of range; it must be 1–500", line: 21, help: "remove `autoscaling` and set `count: 0`" },
    Case { name: "an autoscaling max above 500", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 0, max: 501}\n")],
        code: Code::InvalidValue, message: "spec.nodePools[0].autoscaling.max: 501 is out of range; it must be 1–500", line: 21, help: "1 to 500" },
    Case { name: "an unknown autoscaling field", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 0, max: 3, maxSize: 5}\n")],
        code: Code::UnknownField, message: "spec.nodePools[0].autoscaling.maxSize: unknown field", line: 21, help: "known fields here: `min`, `max`" },
    Case { name: "autoscaling without its max", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      autoscaling: {min: 1}\n")],
        code: Code::MissingField, message: "spec.nodePools[0].autoscaling.max: missing in `spec.nodePools[0].autoscaling`", line: 21, help: "add `max:`" },
    Case { name: "a health check timeout without a unit", edits: &[("      image: ubuntu-24.04\n", "      image: ubuntu-24.04\n      healthCheck:\n        nodeStartupTimeout: 600\n")],
        code: Code::InvalidValue, message: "`600` has no unit", line: 22, help: "`600s` for seconds" },
    Case { name: "a health check condition status misspelt", edits: &[("      image: ubuntu-24.04\n", "      image: ubuntu-24.04\n      healthCheck:\n        unhealthyConditions:\n          - {type: Ready, status: \"false\", timeout: 5m}\n")],
        code: Code::InvalidValue, message: "`false` is not one of `True`, `False`, `Unknown`", line: 23, help: "did you mean `False`?" },
    Case { name: "a health check condition without a timeout", edits: &[("      image: ubuntu-24.04\n", "      image: ubuntu-24.04\n      healthCheck:\n        unhealthyConditions:\n          - {type: Ready, status: Unknown}\n")],
        code: Code::MissingField, message: "missing in `spec.nodePools[0].healthCheck.unhealthyConditions[0]`", line: 23, help: "add `timeout:`" },
    Case { name: "maxUnhealthy over 100%", edits: &[("    image: ubuntu-24.04\n  nodePools", "    image: ubuntu-24.04\n    healthCheck:\n      maxUnhealthy: 140%\n  nodePools")],
        code: Code::InvalidValue, message: "`140%` is not a count or a percentage", line: 17, help: "at most `100%`" },
    Case { name: "pod and service CIDRs overlap", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    podCIDR: 10.96.0.0/16\n    serviceCIDR: 10.96.0.0/12\n")],
        code: Code::CidrOverlap, message: "serviceCIDR 10.96.0.0/12 overlaps podCIDR 10.96.0.0/16", line: 11, help: "must be disjoint" },
    Case { name: "node CIDR overlaps default pod CIDR", edits: &[("cidr: 10.0.0.0/24", "cidr: 10.244.7.0/24")],
        code: Code::CidrOverlap, message: "create.cidr 10.244.7.0/24 overlaps podCIDR 10.244.0.0/16", line: 9, help: "" },
    Case { name: "invalid CIDR string", edits: &[("cidr: 10.0.0.0/24", "cidr: 10.0.0/33")],
        code: Code::InvalidCidr, message: "`10.0.0/33` is not a CIDR", line: 9, help: "e.g. `10.0.0.0/24`" },
    Case { name: "address without prefix", edits: &[("cidr: 10.0.0.0/24", "cidr: 10.0.0.0")],
        code: Code::InvalidCidr, message: "is not a CIDR", line: 9, help: "`10.0.0.0/32`" },
    Case { name: "CIDR with host bits set", edits: &[("cidr: 10.0.0.0/24", "cidr: 10.0.0.5/24")],
        code: Code::CidrHostBits, message: "`10.0.0.5/24` has host bits set", line: 9, help: "did you mean `10.0.0.0/24`?" },
    Case { name: "IPv6 pod range", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    podCIDR: fd00::/64\n")],
        code: Code::InvalidCidr, message: "is IPv6", line: 10, help: "" },
    Case { name: "node subnet too small", edits: &[("cidr: 10.0.0.0/24", "cidr: 10.0.0.0/29")],
        code: Code::CidrSize, message: "`10.0.0.0/29` is too small for the node subnet", line: 9, help: "use /28 or larger" },
    Case { name: "service range too large", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    serviceCIDR: 10.0.0.0/8\n")],
        code: Code::CidrSize, message: "too large for the service range", line: 10, help: "use /12 or smaller" },
    Case { name: "pod range too small for the nodes", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    podCIDR: 10.244.0.0/23\n")],
        code: Code::CidrSize, message: "gives 2 nodes a /24 each, the spec asks for 5", line: 10, help: "`10.244.0.0/21`" },
    Case { name: "pod range on Docker's bridge (warning)", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    podCIDR: 172.16.0.0/12\n")],
        code: Code::CidrReserved, message: "overlaps Docker's default bridge", line: 10, help: "" },
    Case { name: "duplicate pool names", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n    - name: workers\n      count: 1\n      flavor: m1.small\n      image: ubuntu-24.04\n")],
        code: Code::DuplicateName, message: "pool name `workers` is used twice", line: 21, help: "unique" },
    Case { name: "pool named like the control plane", edits: &[("name: workers", "name: cp")],
        code: Code::ReservedName, message: "pool name `cp` is reserved", line: 17, help: "e.g. `pool-cp`" },
    Case { name: "pool named like another pool's ports", edits: &[("name: workers", "name: port-cp")],
        code: Code::ReservedName, message: "would take the ids of the ports of `cp`", line: 17, help: "`port-<pool>-<n>`" },
    Case { name: "pool named like a server group", edits: &[("name: workers", "name: sgroup-a")],
        code: Code::ReservedName, message: "server groups of pools named `a-<n>` (`sgroup-a-0`", line: 17, help: "`pool-sgroup-a`" },
    Case { name: "pool name with uppercase", edits: &[("name: workers", "name: Workers")],
        code: Code::Name, message: "`Workers` contains the uppercase letter `W`", line: 17, help: "e.g. `workers`" },
    Case { name: "cluster name too long for tags", edits: &[("name: demo", "name: payments-production-eu1")],
        code: Code::Name, message: "is 23 characters long; the limit is 20", line: 4, help: "`kos-cluster=<cluster>`" },
    Case { name: "bad taint effect", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      taints: [\"gpu=true:NoSchedul\"]\n")],
        code: Code::Taint, message: "taint effect `NoSchedul`", line: 21, help: "did you mean `NoSchedule`?" },
    Case { name: "taint without effect", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      taints:\n        - dedicated=ml\n")],
        code: Code::Taint, message: "has no effect", line: 22, help: "key=value:Effect" },
    Case { name: "bad label key", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      labels:\n        example.com/-gpu: \"yes\"\n")],
        code: Code::Label, message: "label key `example.com/-gpu` must start with a letter or digit", line: 22, help: "label keys are" },
    Case { name: "label the kubelet may not set (warning)", edits: &[(POOL_TAIL, "      image: ubuntu-24.04\n      labels:\n        node-role.kubernetes.io/worker: \"\"\n")],
        code: Code::Label, message: "kubelet may not set", line: 22, help: "NodeRestriction" },
    Case { name: "negative pool count", edits: &[("count: 2", "count: -1")],
        code: Code::InvalidValue, message: "-1 is out of range; it must be 0–500", line: 18, help: "" },
    Case { name: "pool count too large", edits: &[("count: 2", "count: 501")],
        code: Code::InvalidValue, message: "501 is out of range", line: 18, help: "split larger ones" },
    Case { name: "count given as a string", edits: &[("count: 2", "count: \"2\"")],
        code: Code::WrongType, message: "expected a whole number, found a string", line: 18, help: "remove the quotes" },
    Case { name: "boot volume too small", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n    bootVolume: {sizeGB: 5}\n  nodePools")],
        code: Code::BootVolume, message: "5 is out of range; it must be 10–2048", line: 16, help: "at least 10 GB" },
    Case { name: "empty boot volume zone", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n    bootVolume: {sizeGB: 20, availabilityZone: \" \"}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.controlPlane.bootVolume.availabilityZone: must not be empty", line: 16, help: "remove the field" },
    Case { name: "existing network without subnet", edits: &[("    create:\n      cidr: 10.0.0.0/24\n", "    existing:\n      network: corp-net\n")],
        code: Code::MissingField, message: "spec.network.existing.subnet: missing", line: 8, help: "add `subnet:`" },
    Case { name: "both create and existing", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    existing: {network: a, subnet: b}\n")],
        code: Code::Conflict, message: "has both `create` and `existing`", line: 10, help: "exactly one" },
    Case { name: "neither create nor existing", edits: &[("    create:\n      cidr: 10.0.0.0/24\n", "    externalNetwork: public\n")],
        code: Code::MissingField, message: "needs `create` or `existing`", line: 7, help: "" },
    Case { name: "missing control-plane flavor", edits: &[("count: 3\n    flavor: m1.medium\n", "count: 3\n")],
        code: Code::MissingField, message: "spec.controlPlane.flavor: missing in `spec.controlPlane`", line: 12, help: "add `flavor:`" },
    Case { name: "missing pool image", edits: &[(POOL_TAIL, "")],
        code: Code::MissingField, message: "spec.nodePools[0].image: missing", line: 17, help: "" },
    Case { name: "malformed SSH key", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  sshPublicKey: ssh-rsa AAAAB3NzaC1yc2E\n  nodePools")],
        code: Code::SshKey, message: "the key has no valid base64 key data", line: 16, help: "`.pub` file" },
    Case { name: "private key pasted", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  sshPublicKey: \"-----BEGIN OPENSSH PRIVATE KEY-----\"\n  nodePools")],
        code: Code::SshKey, message: "probably a private key", line: 16, help: "never put a private key here" },
    Case { name: "invalid API allowedCIDRs", edits: &[("type: loadBalancer", "type: loadBalancer\n    allowedCIDRs: [203.0.113.0/24, office]")],
        code: Code::InvalidCidr, message: "spec.apiEndpoint.allowedCIDRs[1]: `office` is not a CIDR", line: 12, help: "" },
    Case { name: "invalid SSH allowedCIDRs", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    ssh:\n      allowedCIDRs: [\"198.51.100.300/32\"]\n")],
        code: Code::InvalidCidr, message: "spec.network.ssh.allowedCIDRs[0]", line: 11, help: "" },
    Case { name: "SSH open to the world (warning)", edits: &[("      cidr: 10.0.0.0/24\n", "      cidr: 10.0.0.0/24\n    ssh:\n      allowedCIDRs: [0.0.0.0/0]\n")],
        code: Code::Risky, message: "SSH (port 22) is open to the whole internet", line: 11, help: "" },
    Case { name: "extra tag with a comma", edits: &[("  name: demo\n", "  name: demo\n  tags: [\"team=a,b\"]\n")],
        code: Code::Tag, message: "tag `team=a,b` contains `,`", line: 5, help: "without `/` or `,`" },
    Case { name: "extra tag using a kos key", edits: &[("  name: demo\n", "  name: demo\n  tags: [kos-cluster=other]\n")],
        code: Code::Tag, message: "uses the key `kos-cluster`", line: 5, help: "" },
    // A record's key: a user's `kos-node=` would shadow the node's record (accepted before).
    Case { name: "extra tag using a record's key", edits: &[("  name: demo\n", "  name: demo\n  tags: [kos-node=0123456789abcdef]\n")],
        code: Code::Tag, message: "uses the key `kos-node`", line: 5, help: "keys starting `kos-`" },
    // Nova refuses a server with more than 50 tags; a control plane carries 11 of kos's (accepted before).
    Case { name: "more extra tags than a server has room for", edits: &[("  name: demo\n", "  name: demo\n  tags: [t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17, t18, t19, t20, t21, t22, t23, t24, t25, t26, t27, t28, t29, t30, t31, t32, t33, t34, t35, t36, t37, t38, t39]\n")],
        code: Code::Tag, message: "metadata.tags: 40 tags; the limit is 39", line: 5, help: "Nova keeps at most 50" },
    Case { name: "wrong apiVersion", edits: &[("kos.dev/v1alpha1", "kos.dev/v1")],
        code: Code::ApiVersion, message: "`kos.dev/v1` is not supported", line: 1, help: "`kos.dev/v1alpha1`" },
    Case { name: "wrong kind", edits: &[("kind: Cluster", "kind: Machine")],
        code: Code::Kind, message: "`Machine` is not supported", line: 2, help: "" },
    Case { name: "YAML syntax error", edits: &[("count: 3", "count: [3")],
        code: Code::Syntax, message: "not valid YAML: illegal placement", line: 14, help: "" },
    Case { name: "duplicate key", edits: &[("    count: 3\n", "    count: 3\n    count: 5\n")],
        code: Code::DuplicateField, message: "spec.controlPlane.count: is given twice", line: 14, help: "" },
    Case { name: "unknown CNI with suggestion", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {cni: calcio}\n  nodePools")],
        code: Code::InvalidValue, message: "`calcio` is not one of", line: 16, help: "did you mean `calico`?" },
    Case { name: "CNI manifest over plain http", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons:\n    cniManifest: {url: \"http://example.com/calico.yaml\", sha256: 0000000000000000000000000000000000000000000000000000000000000000}\n  nodePools")],
        code: Code::InvalidValue, message: "`http://example.com/calico.yaml` is not an https:// URL", line: 17, help: "give an https:// URL" },
    Case { name: "CNI manifest checksum not a sha256", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons:\n    cniManifest: {url: \"https://example.com/calico.yaml\", sha256: ABC}\n  nodePools")],
        code: Code::InvalidValue, message: "`ABC` is not a sha256", line: 17, help: "sha256sum" },
    Case { name: "invalid DNS name for the API", edits: &[("type: loadBalancer", "type: loadBalancer\n    dnsName: api_prod.example.com")],
        code: Code::Name, message: "`api_prod.example.com` contains `_`", line: 12, help: "API certificate" },
    Case { name: "credential lifetime under a week", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {credentialLifetimeDays: 3}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.credentialLifetimeDays: 3 is out of range; it must be 7–365", line: 16, help: "rotates it once a third is left" },
    Case { name: "bare csi: kos, without its image", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {csi: kos}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.csi: `csi: kos` needs the image kos-csi runs from", line: 16, help: "`csi: {kos: {image: <reference>}}`" },
    Case { name: "bare ccm: kos, without its image", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {ccm: kos}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.ccm: `ccm: kos` needs the image kos-ccm runs from", line: 16, help: "scripts/image kos-ccm" },
    Case { name: "unknown CSI with suggestion", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {csi: cindr}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.csi: `cindr` is not one of `cinder`, `none`", line: 16, help: "did you mean `cinder`?" },
    Case { name: "kos-csi image not an image reference", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons:\n    csi:\n      kos: {image: \"kos csi:latest\"}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.csi.kos.image: `kos csi:latest` is not a container image reference", line: 18, help: "registry.example.com/kos/kos-csi:0.1.0" },
    Case { name: "kos-ccm image not an image reference", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {ccm: {kos: {image: \"-ccm\"}}}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.addons.ccm.kos.image: `-ccm` is not a container image reference", line: 16, help: "registry.example.com/kos/kos-ccm:0.1.0" },
    Case { name: "kos-csi without an image", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  addons: {csi: {kos: {}}}\n  nodePools")],
        code: Code::MissingField, message: "spec.addons.csi.kos.image: missing in `spec.addons.csi.kos`", line: 16, help: "add `image:`" },
    Case { name: "public not a boolean", edits: &[("type: loadBalancer", "type: loadBalancer\n    public: yes")],
        code: Code::WrongType, message: "expected `true` or `false`, found a string", line: 12, help: "" },
    Case { name: "registry mirror without a scheme", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    registries: {registry.k8s.io: \"mirror.example:5000\"}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.mirrors.registries.registry.k8s.io: `mirror.example:5000` does not start with http:// or https://", line: 17, help: "https://host[:port]" },
    Case { name: "registry mirror with a path", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    registries: {docker.io: \"https://mirror.example/v2/docker\"}\n  nodePools")],
        code: Code::InvalidValue, message: "has a path", line: 17, help: "same names" },
    Case { name: "registry key is a URL", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    registries: {\"https://quay.io\": \"https://mirror.example\"}\n  nodePools")],
        code: Code::InvalidValue, message: "`https://quay.io` is not a registry host", line: 17, help: "registry.k8s.io, docker.io, quay.io, ghcr.io" },
    Case { name: "mirror with credentials", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    manifests: \"https://u:secret@mirror.example/files\"\n  nodePools")],
        code: Code::InvalidValue, message: "`https://***@mirror.example/files` carries credentials", line: 17, help: "without credentials" },
    Case { name: "OS package mirror without a scheme", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    packages: {os: \"mirror.example/ubuntu\"}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.mirrors.packages.os: `mirror.example/ubuntu` does not start with http:// or https://", line: 17, help: "" },
    Case { name: "unknown package mirror", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    packages: {debian: \"http://mirror.example/debian\"}\n  nodePools")],
        code: Code::UnknownField, message: "debian", line: 17, help: "os" },
    Case { name: "CA bundle not PEM", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    caBundle: mirror-ca.crt\n  nodePools")],
        code: Code::InvalidValue, message: "spec.mirrors.caBundle: not a PEM certificate bundle", line: 17, help: "caBundle: |" },
    Case { name: "unknown mirror field", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    registry: {}\n  nodePools")],
        code: Code::UnknownField, message: "spec.mirrors.registry: unknown field", line: 17, help: "did you mean `registries`?" },
    Case { name: "proxy without a URL", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  proxy:\n    noProxy: [mirror.example]\n  nodePools")],
        code: Code::MissingField, message: "spec.proxy: a proxy needs `http` or `https`", line: 16, help: "https: http://proxy.example:3128" },
    Case { name: "proxy with a password, malformed", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  proxy: {https: \"http://kos:s3cret-pw@proxy.example:99999\"}\n  nodePools")],
        code: Code::InvalidValue, message: "spec.proxy.https: `http://***@proxy.example:99999` has a port that is not a number from 1 to 65535", line: 16, help: "" },
    Case { name: "proxy port out of range", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  proxy: {https: \"http://proxy.example:99999\"}\n  nodePools")],
        code: Code::InvalidValue, message: "has a port that is not a number", line: 16, help: "" },
    Case { name: "partly mirrored without a proxy (warning)", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  mirrors:\n    registries: {registry.k8s.io: \"https://mirror.example:5000\"}\n  nodePools")],
        code: Code::Risky, message: "spec.mirrors: not mirrored, and no proxy: the nodes fetch docker.io's images, quay.io's images, ghcr.io's images, the Kubernetes packages (pkgs.k8s.io), the OS packages (the image's apt sources), the CNI manifest", line: 16, help: "kos artefacts" },
    Case { name: "noProxy entry with a wildcard", edits: &[(CP_IMAGE, "    image: ubuntu-24.04\n  proxy: {https: \"http://proxy.example:3128\", noProxy: [\"*.example.com\"]}\n  nodePools")],
        code: Code::InvalidValue, message: "`*.example.com` is not a host, domain or CIDR", line: 16, help: ".example.com" },
];

#[test]
fn every_example_loads_without_errors_or_warnings() {
    let dir = examples();
    for name in ["minimal.yaml", "ha.yaml", "byo-network.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("example exists");
        match load(name, &text) {
            Ok(loaded) => assert!(loaded.warnings.is_empty(), "{name}: {:?}", loaded.warnings),
            Err(report) => panic!("{name}: {report:#?}"),
        }
    }
}

/// `healthCheck` with Cluster API's spellings; absent, the defaults (Ready Unknown or False for
/// 5 minutes, 10 minutes to start, 100%).
#[test]
fn health_checks_read_as_cluster_api_writes_them() {
    use kos_cluster::spec::{ConditionStatus, HealthCheck, MaxUnhealthy};
    let text = edit(&[(
        "      image: ubuntu-24.04\n",
        "      image: ubuntu-24.04\n      healthCheck:\n        unhealthyConditions:\n          - type: Ready\n            status: \"False\"\n            timeout: 1h30m\n        nodeStartupTimeout: 0s\n        maxUnhealthy: 40%\n",
    )]);
    let spec = load("cluster.yaml", &text).expect("valid").spec;
    let hc = &spec.node_pools[0].health_check;
    assert!(hc.enabled);
    assert_eq!(hc.unhealthy_conditions.len(), 1);
    assert_eq!(hc.unhealthy_conditions[0].condition, "Ready");
    assert_eq!(hc.unhealthy_conditions[0].status, ConditionStatus::False);
    assert_eq!(hc.unhealthy_conditions[0].timeout_secs, 5400);
    assert_eq!(hc.node_startup_timeout_secs, None);
    assert_eq!(hc.max_unhealthy, MaxUnhealthy::Percent(40));
    assert_eq!(hc.max_unhealthy.of(5), 2);
    assert_eq!(spec.control_plane.health_check, HealthCheck::default());

    let off = edit(&[(
        "    image: ubuntu-24.04\n  nodePools",
        "    image: ubuntu-24.04\n    healthCheck: {enabled: false, maxUnhealthy: 1}\n  nodePools",
    )]);
    let spec = load("cluster.yaml", &off).expect("valid").spec;
    assert!(!spec.control_plane.health_check.enabled);
    assert_eq!(
        spec.control_plane.health_check.max_unhealthy,
        MaxUnhealthy::Count(1)
    );
}

/// `autoscaling: {min, max}`: the bounds the cluster-autoscaler keeps the pool's `count` (its
/// target size) within; `count` may sit at either bound; absent, none.
#[test]
fn a_pool_s_autoscaling_bounds_are_read() {
    use kos_cluster::spec::Autoscaling;
    let spec = load("cluster.yaml", BASE).expect("valid").spec;
    assert_eq!(spec.node_pools[0].autoscaling, None);
    for (count, bounds, want) in [
        (2, "{min: 1, max: 10}", Autoscaling { min: 1, max: 10 }),
        (0, "{min: 0, max: 4}", Autoscaling { min: 0, max: 4 }),
        (7, "{max: 7, min: 7}", Autoscaling { min: 7, max: 7 }),
        (
            3,
            "\n        min: 3\n        max: 500",
            Autoscaling { min: 3, max: 500 },
        ),
    ] {
        let text = edit(&[
            ("count: 2", &format!("count: {count}")),
            (
                POOL_TAIL,
                &format!("      image: ubuntu-24.04\n      autoscaling: {bounds}\n"),
            ),
        ]);
        let loaded = load("cluster.yaml", &text).unwrap_or_else(|e| panic!("{bounds}: {e:?}"));
        assert!(
            loaded.warnings.is_empty(),
            "{bounds}: {:?}",
            loaded.warnings
        );
        let pool = &loaded.spec.node_pools[0];
        assert_eq!(pool.autoscaling, Some(want), "{bounds}");
        assert_eq!(pool.count.value, count, "{bounds}");
    }
}

#[test]
fn base_spec_is_valid() {
    let loaded = load("cluster.yaml", BASE).expect("base spec is valid");
    assert!(loaded.warnings.is_empty());
    assert_eq!(loaded.spec.node_count(), 5);
}

#[test]
fn catalogue_of_malformed_specs_each_reports_its_problem_at_its_line() {
    assert!(CASES.len() >= 25);
    let mut failures = Vec::new();
    for case in CASES {
        let text = edit(case.edits);
        let (report, loaded) = all_diagnostics(&text);
        let found = report
            .diagnostics()
            .iter()
            .find(|d| d.code == case.code && d.message.contains(case.message));
        let Some(d) = found else {
            failures.push(format!(
                "{}: no {} containing {:?}; got {:#?}",
                case.name,
                case.code,
                case.message,
                report.diagnostics()
            ));
            continue;
        };
        let line = primary_line(&report, d);
        if line != case.line {
            failures.push(format!(
                "{}: primary label on line {line}, expected {}",
                case.name, case.line
            ));
        }
        if !d.help.as_deref().unwrap_or_default().contains(case.help) {
            failures.push(format!(
                "{}: help {:?} lacks {:?}",
                case.name, d.help, case.help
            ));
        }
        // An error means the spec is refused, so nothing can be created from it.
        if d.severity == Severity::Error && loaded {
            failures.push(format!("{}: error but the spec loaded", case.name));
        }
        if d.severity == Severity::Warning && !loaded {
            failures.push(format!(
                "{}: warning only, yet refused: {:#?}",
                case.name,
                report.diagnostics()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Four unrelated mistakes in four sections.
fn four_errors() -> String {
    edit(&[
        ("\"1.36.4\"", "\"1.27.0\""),
        ("cidr: 10.0.0.0/24", "cidr: 10.96.0.0/24"),
        ("count: 3", "count: 4"),
        ("name: workers", "name: GPU_pool"),
    ])
}

#[test]
fn four_different_errors_are_reported_at_once() {
    let report = load("cluster.yaml", &four_errors()).expect_err("invalid");
    let found: Vec<(Code, usize)> = report
        .errors()
        .map(|d| (d.code, primary_line(&report, d)))
        .collect();
    assert_eq!(
        found,
        [
            (Code::Version, 6),
            (Code::CidrOverlap, 9),
            (Code::ControlPlaneCount, 13),
            (Code::Name, 17),
        ]
    );
}

#[test]
fn structural_and_semantic_errors_are_reported_together() {
    // An unknown key, a wrong type and a semantic rule in other sections do not hide each other.
    let text = edit(&[
        ("  apiEndpoint:", "  apiEndpiont:"),
        ("count: 2", "count: two"),
        ("count: 3", "count: 2"),
    ]);
    let report = load("cluster.yaml", &text).expect_err("invalid");
    let codes: Vec<Code> = report.errors().map(|d| d.code).collect();
    assert_eq!(
        codes,
        [Code::UnknownField, Code::ControlPlaneCount, Code::WrongType]
    );
}

#[test]
fn rendered_report_names_file_lines_and_fixes() {
    use miette::{GraphicalReportHandler, GraphicalTheme};
    let report = load("clusters/prod.yaml", &four_errors()).expect_err("invalid");
    let mut out = String::new();
    GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(120)
        .render_report(&mut out, &report)
        .expect("renders");
    for expected in [
        "kos::spec",
        "`clusters/prod.yaml` is invalid: 4 errors",
        "kos::spec::kubernetes_version",
        "[clusters/prod.yaml:6:22]",
        "spec.kubernetesVersion: `1.27.0` is outside the supported releases (1.34, 1.35, 1.36)",
        "[clusters/prod.yaml:9:13]",
        "kos::spec::cidr_overlap",
        "create.cidr 10.96.0.0/24 overlaps serviceCIDR 10.96.0.0/12",
        "serviceCIDR defaults to 10.96.0.0/12",
        "[clusters/prod.yaml:13:12]",
        "help: use 3 or 5",
        "[clusters/prod.yaml:17:13]",
        "e.g. `gpu-pool`",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

/// A proxy's or a mirror's password in the spec never reaches the rendered report: not in a
/// message, not in the snippet of the line (masked there byte for byte, the labels still in place),
/// not even one with a space in it.
#[test]
fn a_rendered_report_shows_no_password_of_a_url() {
    use miette::{GraphicalReportHandler, GraphicalTheme};
    let text = edit(&[(
        CP_IMAGE,
        "    image: ubuntu-24.04\n  proxy: {https: \"http://kos:s3cret-pw@proxy.example:99999\", http: \"http://kos:s3cret pw@proxy.example:3128\"}\n  mirrors:\n    manifests: \"https://u:m1rror-pw@mirror.example/files\"\n  nodePools",
    )]);
    let report = load("c.yaml", &text).expect_err("invalid");
    let mut out = String::new();
    GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(120)
        .render_report(&mut out, &report)
        .expect("renders");
    assert!(
        !out.contains("s3cret") && !out.contains("m1rror-pw"),
        "{out}"
    );
    for shown in [
        "http://*************@proxy.example:99999",
        "https://***********@mirror.example/files",
        "has a port that is not a number",
        // A password with a space: the parser refuses it, and neither says it.
        "`http://***@proxy.example:3128` has a space, a quote or a control character",
        "http://*************@proxy.example:3128",
        "carries credentials",
    ] {
        assert!(out.contains(shown), "missing {shown:?} in:\n{out}");
    }
}

#[test]
fn defaults_are_applied_and_typed() {
    use kos_cluster::spec::{
        Addons, ControlPlaneCount, DEFAULT_POD_CIDR, DEFAULT_SERVICE_CIDR, EndpointKind, ImageRef,
        LbProvider, NetworkSource, ResourceRef, ServerGroupPolicy,
    };
    let dir = examples();
    let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).expect("example");

    let minimal = load("minimal.yaml", &read("minimal.yaml"))
        .expect("valid")
        .spec;
    assert_eq!(minimal.name.as_str(), "demo");
    assert_eq!(minimal.kubernetes_version.to_string(), "1.36.4");
    assert_eq!(minimal.network.pod_cidr.value, DEFAULT_POD_CIDR);
    assert_eq!(minimal.network.service_cidr.value, DEFAULT_SERVICE_CIDR);
    assert!(minimal.network.ssh_allowed_cidrs.is_empty());
    assert!(minimal.network.external_network.is_none());
    assert_eq!(minimal.api_endpoint.kind.value, EndpointKind::FloatingIp);
    assert!(minimal.api_endpoint.public);
    assert_eq!(minimal.control_plane.count.value, ControlPlaneCount::One);
    assert_eq!(
        minimal.control_plane.server_group_policy,
        ServerGroupPolicy::None
    );
    assert_eq!(
        minimal.node_pools[0].server_group_policy,
        ServerGroupPolicy::SoftAntiAffinity
    );
    assert_eq!(minimal.addons, Addons::default());
    assert_eq!(minimal.node_count(), 3);

    let byo = load("byo-network.yaml", &read("byo-network.yaml"))
        .expect("valid")
        .spec;
    let NetworkSource::Existing(existing) = &byo.network.source else {
        panic!("byo-network uses an existing network");
    };
    assert_eq!(
        existing.subnet.value,
        ResourceRef::Name("private-subnet".into())
    );
    assert!(matches!(
        byo.control_plane.machine.image.value,
        ImageRef::Ref(ResourceRef::Name(_))
    ));
    assert_eq!(
        byo.api_endpoint.kind.value,
        EndpointKind::LoadBalancer {
            provider: LbProvider::Ovn
        }
    );
    assert_eq!(
        byo.control_plane.server_group_policy,
        ServerGroupPolicy::AntiAffinity
    );

    let ha = load("ha.yaml", &read("ha.yaml")).expect("valid").spec;
    assert_eq!(ha.kubernetes_version.to_string(), "1.36.4");
    assert_eq!(
        ha.node_pools[1].taints[0].to_string(),
        "example.com/dedicated=batch:NoSchedule"
    );
    assert_eq!(ha.node_count(), 8);
    assert_eq!(ha.service_lb_provider(), Some(LbProvider::Amphora));
    assert_eq!(byo.service_lb_provider(), Some(LbProvider::Ovn));
    assert_eq!(minimal.service_lb_provider(), None);
}

#[test]
fn a_cni_manifest_pin_is_read() {
    use kos_cluster::spec::{Cni, CniManifest};
    let example = format!("{}/minimal.yaml", examples());
    let text = std::fs::read_to_string(example).expect("example").replace(
        "  nodePools:",
        "  addons:\n    cni: flannel\n    cniManifest:\n      url: https://example.com/kube-flannel.yml\n      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n  nodePools:",
    );
    let spec = load("minimal.yaml", &text).expect("valid").spec;
    assert_eq!(spec.addons.cni, Cni::Flannel);
    assert_eq!(
        spec.addons.cni_manifest,
        Some(CniManifest {
            url: "https://example.com/kube-flannel.yml".into(),
            sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        })
    );
}

/// `csi: {kos: {image}}` is kos-csi from that image, with either CCM: the two are independent (kos-csi
/// reads cloud.conf's `[Global]` itself and needs nothing of the CCM).
#[test]
fn kos_csi_is_read_with_its_image_and_with_either_ccm() {
    use kos_cluster::spec::{Ccm, Csi};
    let kos_csi = Csi::Kos {
        image: "registry.example.com/kos/kos-csi:0.1.0".into(),
    };
    let text = edit(&[(
        CP_IMAGE,
        "    image: ubuntu-24.04\n  addons:\n    csi:\n      kos: {image: registry.example.com/kos/kos-csi:0.1.0}\n  nodePools",
    )]);
    let spec = load("cluster.yaml", &text).expect("valid").spec;
    assert_eq!(spec.addons.csi, kos_csi);
    // What a control plane records (`kos-csi=kos`): a later change of driver is refused against it.
    assert_eq!(spec.addons.csi.key(), "kos");
    assert_eq!(spec.addons.ccm, Ccm::Upstream);
    let text = edit(&[(
        CP_IMAGE,
        "    image: ubuntu-24.04\n  addons:\n    ccm: {kos: {image: registry.example.com/kos/kos-ccm:0.1.0}}\n    csi: {kos: {image: \"registry.example.com/kos/kos-csi:0.1.0\"}}\n  nodePools",
    )]);
    let spec = load("cluster.yaml", &text).expect("valid").spec;
    assert_eq!(spec.addons.csi, kos_csi);
    assert_eq!(
        spec.addons.ccm,
        Ccm::Kos {
            image: "registry.example.com/kos/kos-ccm:0.1.0".into()
        }
    );
    // The other spellings are as before.
    for (given, want) in [("cinder", Csi::Cinder), ("none", Csi::None)] {
        let text = edit(&[(
            CP_IMAGE,
            &format!("    image: ubuntu-24.04\n  addons: {{csi: {given}}}\n  nodePools"),
        )]);
        assert_eq!(
            load("cluster.yaml", &text).expect("valid").spec.addons.csi,
            want
        );
    }
}

#[test]
fn the_credential_lifetime_is_read_and_defaults_to_90_days() {
    let spec = load("cluster.yaml", BASE).expect("valid").spec;
    assert_eq!(spec.addons.credential_lifetime_days(), 90);
    let text = edit(&[(
        CP_IMAGE,
        "    image: ubuntu-24.04\n  addons: {credentialLifetimeDays: 30}\n  nodePools",
    )]);
    let spec = load("cluster.yaml", &text).expect("valid").spec;
    assert_eq!(spec.addons.credential_lifetime_days(), 30);
}

#[test]
fn mirrors_and_a_proxy_are_read() {
    let text = edit(&[(
        CP_IMAGE,
        "    image: ubuntu-24.04\n  mirrors:\n    registries:\n      registry.k8s.io: https://mirror.example:5000\n      docker.io: http://10.0.0.9:5000/\n    caBundle: |\n      -----BEGIN CERTIFICATE-----\n      MIIB\n      -----END CERTIFICATE-----\n    packages: {kubernetes: \"https://mirror.example/pkgs.k8s.io\", os: \"http://mirror.example/ubuntu\", osSecurity: \"http://sec.example/ubuntu\"}\n    manifests: https://mirror.example/files/\n  proxy:\n    https: http://user:pw@proxy.example:3128\n    noProxy: [.corp.example, 192.168.0.0/16]\n  nodePools",
    )]);
    let spec = load("cluster.yaml", &text).expect("valid").spec;
    let m = &spec.mirrors;
    assert_eq!(m.registries.len(), 2);
    let k8s = &m.registries["registry.k8s.io"];
    assert_eq!(
        (k8s.scheme(), k8s.authority(), k8s.host()),
        ("https", "mirror.example:5000", "mirror.example")
    );
    assert_eq!(m.registries["docker.io"].authority(), "10.0.0.9:5000");
    assert!(
        m.ca_bundle
            .as_deref()
            .is_some_and(|c| c.starts_with("-----BEGIN CERTIFICATE-----\n"))
    );
    assert_eq!(
        m.kubernetes_packages.as_ref().map(|u| u.as_str()),
        Some("https://mirror.example/pkgs.k8s.io")
    );
    assert_eq!(
        m.os_packages.as_ref().map(|u| u.as_str()),
        Some("http://mirror.example/ubuntu")
    );
    assert_eq!(
        m.os_security_packages.as_ref().map(|u| u.as_str()),
        Some("http://sec.example/ubuntu")
    );
    assert_eq!(m.manifests.as_ref().map(|u| u.path()), Some("/files/"));
    let p = spec.proxy.expect("proxy");
    assert!(p.http.is_none());
    let https = p.https.expect("https proxy");
    assert_eq!(https.redacted(), "http://***@proxy.example:3128");
    assert!(
        !format!("{https:?}").contains("pw"),
        "Debug shows the password"
    );
    assert_eq!(p.no_proxy, vec![".corp.example", "192.168.0.0/16"]);
    // Without the fields: nothing mirrored, no proxy.
    let plain = load("cluster.yaml", BASE).expect("valid").spec;
    assert!(plain.mirrors.is_empty() && plain.proxy.is_none());
}

/// examples/ of the checkout under test (`CARGO_MANIFEST_DIR` as cargo gives it at run time: the
/// compiled-in one may be another checkout's, sharing the target directory).
fn examples() -> String {
    let here = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    format!("{here}/../../examples")
}
