//! Changing a running cluster's Kubernetes version. kos does not upgrade yet (no rolling replacement
//! of nodes), and a changed `kubernetesVersion` would otherwise only reach the nodes created next: a
//! kubelet newer than the API servers it talks to, which the version-skew policy forbids (and kubeadm's
//! join refuses). So a change is refused before anything is made, saying what upgrading takes: one
//! minor at a time, control planes first.

use kos_bootstrap::KubeVersion;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "the cluster runs Kubernetes {running}; changing it to {wanted} is not supported yet: kos does not \
         upgrade or downgrade a running cluster's nodes{path}. Keep kubernetesVersion {running} in the spec"
    )]
    Change {
        running: KubeVersion,
        wanted: KubeVersion,
        /// `` (one minor or a patch) or `; an upgrade goes one minor at a time: 1.34 → 1.35 → 1.36`.
        path: String,
    },
}

/// `Ok` when `wanted` is what the cluster runs.
///
/// # Errors
/// Any other version, with the path an upgrade would take when it spans minors.
pub fn check_change(running: KubeVersion, wanted: KubeVersion) -> Result<(), VersionError> {
    if running == wanted {
        return Ok(());
    }
    let path = if wanted.major == running.major && wanted.minor > running.minor + 1 {
        let steps: Vec<String> = (running.minor..=wanted.minor)
            .map(|m| format!("{}.{m}", running.major))
            .collect();
        format!(
            "; an upgrade goes one minor at a time: {}",
            steps.join(" → ")
        )
    } else {
        String::new()
    };
    Err(VersionError::Change {
        running,
        wanted,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("a version")
    }

    #[test]
    fn only_the_running_version_passes_and_a_jump_names_its_path() {
        assert_eq!(check_change(v("1.36.4"), v("1.36.4")), Ok(()));
        let patch = check_change(v("1.36.4"), v("1.36.5")).expect_err("a patch change");
        assert!(patch.to_string().contains("1.36.4"), "{patch}");
        assert!(
            !patch.to_string().contains("one minor at a time"),
            "{patch}"
        );
        let jump = check_change(v("1.34.2"), v("1.36.4")).expect_err("two minors");
        assert!(
            jump.to_string()
                .contains("one minor at a time: 1.34 → 1.35 → 1.36"),
            "{jump}"
        );
        assert!(
            check_change(v("1.36.4"), v("1.35.9")).is_err(),
            "a downgrade"
        );
    }
}
