//! The images kubeadm pulls (`images.GetControlPlaneImages`, what `kubeadm config images list`
//! prints and the `ImagePull` preflight check pulls), and the sandbox image containerd runs pods on.
//!
//! The guest keeps its own copy of kubeadm's per-release tags (it shares no code with
//! kos-bootstrap, which holds kos's copy in its pins table): etcd, CoreDNS and pause as each
//! release's kubeadm lists them. Read from minikube's `constants_kubeadm_images.go` at eb25dbc
//! (2026-08-23), which minikube generates by running each release's kubeadm binary; for example
//! kubeadm v1.34.1 lists etcd 3.6.4-0 and v1.34.2 etcd 3.6.5-0. A patch newer than the newest read
//! keeps its minor's last row.

use super::config::ClusterDoc;
use crate::version::Version;

/// kubeadm's `DefaultImageRepository`.
pub const DEFAULT_REPOSITORY: &str = "registry.k8s.io";

/// containerd 1.7's `containerd config default` sandbox image (`sandbox_image` of the CRI plugin),
/// what a node runs pods on unless its configuration names another.
pub const CONTAINERD_DEFAULT_SANDBOX: &str = "registry.k8s.io/pause:3.8";

/// (minor, first patch, etcd, CoreDNS, pause), oldest first.
const TAGS: [(u32, u32, &str, &str, &str); 4] = [
    (34, 0, "3.6.4-0", "v1.12.1", "3.10.1"),
    (34, 2, "3.6.5-0", "v1.12.1", "3.10.1"),
    (35, 0, "3.6.6-0", "v1.13.1", "3.10.1"),
    (36, 0, "3.6.8-0", "v1.14.2", "3.10.2"),
];

struct Tags {
    etcd: &'static str,
    coredns: &'static str,
    pause: &'static str,
}

/// The tags of kubeadm at `v`; `None` for a release the guest does not know (older than its table:
/// kos's specs refuse those first, and a newer minor takes the newest row).
fn tags(v: Version) -> Option<Tags> {
    let row = TAGS
        .iter()
        .rev()
        .find(|(minor, patch, ..)| (v.minor, v.patch) >= (*minor, *patch))
        .or_else(|| TAGS.last().filter(|(minor, ..)| v.minor > *minor))?;
    Some(Tags {
        etcd: row.2,
        coredns: row.3,
        pause: row.4,
    })
}

/// kubeadm's `GetPauseImage`: the pause image in `imageRepository`.
pub fn pause(cluster: &ClusterDoc) -> Option<String> {
    let t = tags(cluster.kubernetes_version)?;
    Some(format!("{}/pause:{}", repository(cluster), t.pause))
}

fn repository(cluster: &ClusterDoc) -> &str {
    cluster.image_repository.trim_end_matches('/')
}

/// kubeadm's `GetControlPlaneImages`, in its order (as `kubeadm init` logs its pulls): the control
/// plane and kube-proxy at the cluster's version, CoreDNS, pause, then etcd (local etcd only).
/// CoreDNS keeps registry.k8s.io's `coredns/coredns` only in the default repository; elsewhere it
/// is `<repo>/coredns` unless `dns.imageRepository` says otherwise (`GetDNSImage`).
pub fn control_plane(cluster: &ClusterDoc) -> Option<Vec<String>> {
    let t = tags(cluster.kubernetes_version)?;
    let repo = repository(cluster);
    let tag = cluster.kubernetes_version.to_string();
    let mut out: Vec<String> = [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ]
    .iter()
    .map(|n| format!("{repo}/{n}:{tag}"))
    .collect();
    let dns_repo = match &cluster.dns_image_repository {
        Some(r) => r.trim_end_matches('/').to_owned(),
        None if repo == DEFAULT_REPOSITORY => format!("{repo}/coredns"),
        None => repo.to_owned(),
    };
    out.push(format!("{dns_repo}/coredns:{}", t.coredns));
    out.push(format!("{repo}/pause:{}", t.pause));
    let etcd_repo = cluster
        .etcd_image_repository
        .as_deref()
        .map_or(repo, |r| r.trim_end_matches('/'));
    out.push(format!("{etcd_repo}/etcd:{}", t.etcd));
    Some(out)
}

/// `registry`, `path` and `tag` of `registry/path:tag`.
pub fn split(image: &str) -> Option<(&str, &str, &str)> {
    let (registry, rest) = image.split_once('/')?;
    let (path, tag) = rest.rsplit_once(':')?;
    Some((registry, path, tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(version: &str, repo: &str, dns: Option<&str>) -> ClusterDoc {
        let mut yaml = format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v{version}\nimageRepository: {repo}\n"
        );
        if let Some(d) = dns {
            yaml.push_str(&format!("dns:\n  imageRepository: {d}\n"));
        }
        super::super::config::parse_cluster_configuration(&yaml).expect("valid")
    }

    /// As `kubeadm config images list` prints them (the order of a real 1.32 init's pulls).
    #[test]
    fn default_repository_keeps_coredns_level() {
        let c = cluster("1.34.1", DEFAULT_REPOSITORY, None);
        assert_eq!(
            control_plane(&c).expect("known release"),
            [
                "registry.k8s.io/kube-apiserver:v1.34.1",
                "registry.k8s.io/kube-controller-manager:v1.34.1",
                "registry.k8s.io/kube-scheduler:v1.34.1",
                "registry.k8s.io/kube-proxy:v1.34.1",
                "registry.k8s.io/coredns/coredns:v1.12.1",
                "registry.k8s.io/pause:3.10.1",
                "registry.k8s.io/etcd:3.6.4-0",
            ]
        );
        let later = cluster("1.34.7", DEFAULT_REPOSITORY, None);
        assert!(control_plane(&later).expect("known release")[6].ends_with("etcd:3.6.5-0"));
    }

    #[test]
    fn custom_repository_drops_coredns_level_unless_named() {
        let c = cluster("1.36.4", "mirror.example:5000", None);
        let imgs = control_plane(&c).expect("known release");
        assert_eq!(imgs[4], "mirror.example:5000/coredns:v1.14.2");
        assert_eq!(imgs[5], "mirror.example:5000/pause:3.10.2");
        let named = cluster(
            "1.36.4",
            "mirror.example:5000",
            Some("mirror.example:5000/coredns"),
        );
        assert_eq!(
            control_plane(&named).expect("known release")[4],
            "mirror.example:5000/coredns/coredns:v1.14.2"
        );
        assert_eq!(
            split("mirror.example:5000/coredns/coredns:v1.14.2"),
            Some(("mirror.example:5000", "coredns/coredns", "v1.14.2"))
        );
    }
}
