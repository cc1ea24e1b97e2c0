//! The internet, as far as a bootstrap downloads from it: the pinned CNI manifests, by URL, with the
//! real sha256 of the bytes each URL serves (copied from the project's research notes
//! `research/cni-pins.md`, which computed them from the upstream tags with `git show TAG:PATH |
//! sha256sum`). The guest cannot have the manifests' content, so a download is its checksum plus a
//! stand-in of what applying it makes (the CNI's DaemonSet in kube-system). Any other URL fails as an
//! unreachable download does (curl's exit 22, "The requested URL returned error: 404"); while the
//! host reports an outage for a URL (kos-sim's `/_sim/internet`), its host does not resolve.
//!
//! **Mirrors.** An air-gapped cloud's operator fills a mirror with what the nodes fetch. The guest
//! models a mirror filled completely, at the layout kos documents: a file published at
//! `https://HOST/PATH` is served at `<base>/HOST/PATH` by any host (reachable or not is the
//! internet's call, `/_sim/internet`), the Kubernetes package repositories below any base at
//! pkgs.k8s.io's paths, and images by any registry host containerd is pointed at. What the guest
//! cannot tell is whether a real mirror holds every file: a mirror missing one fails on a real node.

/// A CNI manifest the internet serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniManifest {
    pub url: &'static str,
    pub sha256: &'static str,
    /// The DaemonSet that applying the manifest creates in kube-system.
    pub daemonset: &'static str,
    /// The pod network the manifest hard-codes, if any (flannel's net-conf.json).
    pub pod_cidr_default: Option<&'static str>,
}

const MANIFESTS: &[CniManifest] = &[
    CniManifest {
        url: "https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml",
        sha256: "a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744",
        daemonset: "calico-node",
        pod_cidr_default: None,
    },
    CniManifest {
        url: "https://raw.githubusercontent.com/projectcalico/calico/v3.28.2/manifests/calico.yaml",
        sha256: "be59408bf990e96276f631d2f9285c2a0f9802194c0ad1cecdb6d9c52623a1c8",
        daemonset: "calico-node",
        pod_cidr_default: None,
    },
    CniManifest {
        url: "https://raw.githubusercontent.com/flannel-io/flannel/v0.28.9/Documentation/kube-flannel.yml",
        sha256: "e875824be2f552b45711dbda91af81b17eb961d00025d914d9fef18fad8f09c0",
        daemonset: "kube-flannel-ds",
        pod_cidr_default: Some("10.244.0.0/16"),
    },
    CniManifest {
        url: "https://raw.githubusercontent.com/flannel-io/flannel/v0.26.1/Documentation/kube-flannel.yml",
        sha256: "7bc4fc42328f5a0d53b3f9a80bccaa618ec984b1e08539f5ebf66a950184fe42",
        daemonset: "kube-flannel-ds",
        pod_cidr_default: Some("10.244.0.0/16"),
    },
    CniManifest {
        url: "https://raw.githubusercontent.com/cloudnativelabs/kube-router/v2.11.1/daemonset/kubeadm-kuberouter.yaml",
        sha256: "847b9b7a47c31d8e10149f5b4d94c78ea214d1c1d70df1640744ae21b0b9121a",
        daemonset: "kube-router",
        pod_cidr_default: None,
    },
    // The kube-router manifest is the same file at v2.1.1 and v2.11.1 (research/cni-pins.md).
    CniManifest {
        url: "https://raw.githubusercontent.com/cloudnativelabs/kube-router/v2.1.1/daemonset/kubeadm-kuberouter.yaml",
        sha256: "847b9b7a47c31d8e10149f5b4d94c78ea214d1c1d70df1640744ae21b0b9121a",
        daemonset: "kube-router",
        pod_cidr_default: None,
    },
];

/// What `curl -fsSL URL` prints when the internet does not reach the URL's host (an outage).
pub fn unreachable(url: &str) -> String {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', ':'])
        .next()
        .unwrap_or_default();
    format!("curl: (6) Could not resolve host: {host}")
}

/// The host of a URL (`host[:port]` without the port).
pub fn host_of(url: &str) -> &str {
    url.split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', ':'])
        .next()
        .unwrap_or_default()
}

/// What `curl -fsSL URL` gets: a published manifest, at its own URL or a mirror's copy of it.
pub fn download(url: &str) -> Result<&'static CniManifest, String> {
    MANIFESTS
        .iter()
        .find(|m| {
            let published = m.url.split_once("://").map_or(m.url, |(_, r)| r);
            m.url == url
                || (url.starts_with("http") && url.ends_with(&format!("/{published}")))
        })
        .ok_or_else(|| format!("curl: (22) The requested URL returned error: 404 ({url} is not on kos-guest's internet)"))
}

/// pkgs.k8s.io's Kubernetes repository of a minor, `core:/stable:/v1.N/deb/`, at its base
/// (pkgs.k8s.io or a mirror of it): what `apt-get` reads. `Err`: what the script's
/// `curl …Release.key` prints.
pub fn package_repository(repo: &str) -> Result<(), String> {
    let ok = repo.starts_with("https://") || repo.starts_with("http://");
    let tail = repo.split_once("/core:/stable:/").map(|(_, t)| t);
    let minor_ok = tail.is_some_and(|t| {
        t.strip_prefix("v1.")
            .and_then(|r| r.strip_suffix("/deb/"))
            .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
    });
    if ok && minor_ok {
        Ok(())
    } else {
        Err(format!(
            "curl: (22) The requested URL returned error: 404 ({repo}Release.key is not a Kubernetes package repository)"
        ))
    }
}

/// Where containerd pulls an image of `registry` (`host[:port]`) from, in its order: the `[host]`
/// entries of `/etc/containerd/certs.d/<registry>/hosts.toml`, then the registry itself (its
/// `server`, or Docker Hub's API host). The node's `hosts_toml` is that file's text, if any.
pub fn pull_hosts(registry: &str, hosts_toml: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = hosts_toml
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("[host.\"")
                .and_then(|r| r.strip_suffix("\"]"))
                .map(str::to_owned)
        })
        .collect();
    let server = hosts_toml.and_then(|t| {
        t.lines().find_map(|l| {
            l.trim()
                .strip_prefix("server = \"")
                .and_then(|r| r.strip_suffix('"'))
                .map(str::to_owned)
        })
    });
    out.push(server.unwrap_or_else(|| {
        if registry == "docker.io" {
            "https://registry-1.docker.io".to_owned()
        } else {
            format!("https://{registry}")
        }
    }));
    out
}
