//! Changing a running cluster's Kubernetes version. An upgrade is a rolling replacement
//! ([`crate::roll`]): control planes first, then workers, each new node at the new release. The
//! version-skew policy allows API servers one minor apart and no kubelet newer than the API server, so
//! an upgrade goes one minor at a time, and kos never downgrades (etcd's and the API's stored objects
//! may not be readable by an older release).
//!
//! What the cluster runs is what its servers were made with (their `kos-k8s` record tags): during an
//! upgrade two releases run, and the next one must wait until every node is on the newer.

use kos_bootstrap::KubeVersion;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "the cluster runs Kubernetes {running}; kos does not downgrade a running cluster to {wanted}. Keep \
         kubernetesVersion {running} (or newer) in the spec"
    )]
    Downgrade {
        running: KubeVersion,
        wanted: KubeVersion,
    },
    #[error(
        "the cluster runs Kubernetes {oldest}; {wanted} is more than one minor newer{path}. Set kubernetesVersion \
         to the next minor and, once that is rolled out, to the one after"
    )]
    Jump {
        oldest: KubeVersion,
        wanted: KubeVersion,
        /// `; an upgrade goes one minor at a time: 1.34 → 1.35 → 1.36`.
        path: String,
    },
}

/// `Ok` for the release the servers run, a patch release, or the next minor of the oldest server.
///
/// # Errors
/// A downgrade below the newest server, or a jump past the next minor of the oldest.
pub fn check_change(running: &[KubeVersion], wanted: KubeVersion) -> Result<(), VersionError> {
    let (Some(oldest), Some(newest)) = (running.iter().min(), running.iter().max()) else {
        return Ok(());
    };
    if wanted < *newest {
        return Err(VersionError::Downgrade {
            running: *newest,
            wanted,
        });
    }
    if wanted.major != oldest.major || wanted.minor > oldest.minor + 1 {
        let path = if wanted.major == oldest.major {
            let steps: Vec<String> = (oldest.minor..=wanted.minor)
                .map(|m| format!("{}.{m}", oldest.major))
                .collect();
            format!(
                "; an upgrade goes one minor at a time: {}",
                steps.join(" → ")
            )
        } else {
            String::new()
        };
        return Err(VersionError::Jump {
            oldest: *oldest,
            wanted,
            path,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("a version")
    }

    #[test]
    fn one_minor_up_passes_a_jump_names_its_path_and_a_downgrade_is_refused() {
        assert_eq!(check_change(&[], v("1.36.4")), Ok(()));
        assert_eq!(check_change(&[v("1.36.4")], v("1.36.4")), Ok(()));
        assert_eq!(check_change(&[v("1.36.4")], v("1.36.5")), Ok(()));
        assert_eq!(check_change(&[v("1.35.2")], v("1.36.0")), Ok(()));
        let jump = check_change(&[v("1.34.2")], v("1.36.4")).expect_err("two minors");
        assert!(
            jump.to_string()
                .contains("one minor at a time: 1.34 → 1.35 → 1.36"),
            "{jump}"
        );
        // kos-operator puts it in a Cluster's Degraded condition as it is: no CLI command in it.
        assert!(!jump.to_string().contains("kos "), "{jump}");
        assert!(matches!(
            check_change(&[v("1.36.4")], v("1.35.9")),
            Err(VersionError::Downgrade { .. })
        ));
        assert!(matches!(
            check_change(&[v("1.36.4")], v("1.36.3")),
            Err(VersionError::Downgrade { .. })
        ));
    }

    #[test]
    fn during_an_upgrade_the_oldest_node_bounds_the_next_one() {
        let mid = [v("1.34.2"), v("1.35.0"), v("1.35.0")];
        assert_eq!(check_change(&mid, v("1.35.0")), Ok(()));
        assert!(matches!(
            check_change(&mid, v("1.36.0")),
            Err(VersionError::Jump { .. })
        ));
        assert!(matches!(
            check_change(&mid, v("1.34.2")),
            Err(VersionError::Downgrade { .. })
        ));
    }
}
