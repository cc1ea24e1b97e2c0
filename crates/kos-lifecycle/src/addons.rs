//! Addons whose release follows the cluster's minor: cloud-provider-openstack's cloud controller
//! and Cinder CSI (its release N.M goes with Kubernetes N.M). The first control plane installs them
//! at the release of its minor; after an upgrade their images move to the new minor's, the
//! workloads' controllers rolling their pods. kos's own kos-ccm and kos-csi run from the image the
//! spec names (`addons.ccm.kos.image`, `addons.csi.kos.image`): they are the user's and never move.

/// `registry/path/name` and the tag of an image reference (a digest is kept with the name).
fn split(image: &str) -> (&str, Option<&str>) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (&image[..slash + i], Some(&image[slash + i + 1..])),
        None => (image, None),
    }
}

/// The image `current` should run: the pinned one of the same repository when its tag differs.
#[must_use]
pub fn retag(current: &str, pinned: &[&str]) -> Option<String> {
    let (repo, tag) = split(current);
    pinned.iter().find_map(|p| {
        let (prepo, ptag) = split(p);
        (prepo == repo && ptag != tag).then(|| (*p).to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINS: [&str; 2] = [
        "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0",
        "registry.k8s.io/provider-os/cinder-csi-plugin:v1.36.0",
    ];

    #[test]
    fn only_the_pinned_repositories_move_to_the_new_release() {
        assert_eq!(
            retag(
                "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.35.0",
                &PINS
            )
            .as_deref(),
            Some(PINS[0])
        );
        assert_eq!(retag(PINS[1], &PINS), None, "already there");
        for sidecar in [
            "registry.k8s.io/sig-storage/csi-attacher:v4.8.0",
            // The snapshot sidecar and external-snapshotter's controller are kept like the others.
            "registry.k8s.io/sig-storage/csi-snapshotter:v8.3.0",
            "registry.k8s.io/sig-storage/snapshot-controller:v8.3.0",
        ] {
            assert_eq!(
                retag(sidecar, &PINS),
                None,
                "sidecars do not follow the minor"
            );
        }
        assert_eq!(
            retag(
                "localhost:5000/provider-os/cinder-csi-plugin:v1.35.0",
                &PINS
            ),
            None,
            "another registry is the operator's"
        );
    }

    /// `ccm: kos` and `csi: kos` run from the user's image, whatever its repository is called (a
    /// drop-in may well be pushed as `…/cinder-csi-plugin`): an upgrade leaves it as it is.
    #[test]
    fn kos_ccm_and_kos_csi_keep_the_users_image() {
        for own in [
            "registry.example.com/kos/kos-ccm:0.1.0",
            "registry.example.com/kos/kos-csi:0.1.0",
            "ghcr.io/example/kos-csi:v1.35.0",
            "registry.example.com/kos/cinder-csi-plugin:v1.35.0",
            "registry.example.com/provider-os/openstack-cloud-controller-manager:kos-0.1.0",
        ] {
            assert_eq!(retag(own, &PINS), None, "{own}");
        }
    }
}
