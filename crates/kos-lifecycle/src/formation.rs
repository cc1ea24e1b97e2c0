//! Whether a cluster exists for the spec's control planes.
//!
//! kubeadm makes a cluster with `kubeadm init` once; every later control plane must `kubeadm join` it. A
//! second init, on a re-created `cp-0` for instance, starts a second cluster behind the same endpoint: data
//! loss with one control plane, split brain with three. So the decision is taken from what the cloud and
//! the cluster show, never from a server's name.

use kos_cluster::bootstrap::Formation;
use kos_cluster::graph::Kind;
use kos_cluster::observe::Observed;

/// What kos saw of a cluster before deciding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Control-plane servers of the cluster that exist and are not in ERROR (sorted). Each ran, runs or
    /// will run its bootstrap: as the initializer, or joining the cluster one initialized.
    pub running_control_planes: Vec<String>,
    /// What the cluster's API said at its endpoint; `None` when it was not asked.
    pub api: Option<ApiAnswer>,
    /// Whether a running control plane's console shows that it ran `kubeadm init` or `join` (of
    /// any outcome), or no longer tells (its markers scrolled out, it could not be read); `None`
    /// when not read. `Some(false)`: every one of them is still before kubeadm.
    pub kubeadm_seen: Option<bool>,
}

/// The control plane a fresh cluster's graph makes the initializer (its first slot).
pub const INITIALIZER: &str = "cp-0";

/// The cluster's API at its endpoint, over TLS verified with the cluster's CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiAnswer {
    /// It answered: a cluster with this CA exists.
    Answered,
    /// No answer (why, for the log): unreachable from here, or no cluster.
    Silent(String),
}

/// The decision and why, for the run's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub formation: Formation,
    pub reason: String,
}

impl Evidence {
    /// Whether the API needs asking: running control planes prove the cluster, unless the
    /// initializer is not among them (they may be waiting to join a cluster never initialised).
    #[must_use]
    pub fn needs_api(&self) -> bool {
        self.running_control_planes.is_empty() || !self.initializer_runs()
    }

    /// Whether the consoles need reading: control planes run without the initializer, and the API
    /// did not answer.
    #[must_use]
    pub fn needs_consoles(&self) -> bool {
        !self.running_control_planes.is_empty()
            && !self.initializer_runs()
            && self.api != Some(ApiAnswer::Answered)
    }

    fn initializer_runs(&self) -> bool {
        self.running_control_planes.iter().any(|c| c == INITIALIZER)
    }
}

/// The control-plane servers (`cp-<n>`) in `observed` that exist and are not in ERROR: a server in ERROR
/// never booted, so it proves nothing (and is replaced).
#[must_use]
pub fn running_control_planes(observed: &Observed) -> Vec<String> {
    let mut out: Vec<String> = observed
        .resources
        .iter()
        .filter(|(id, found)| {
            is_control_plane(id)
                && found
                    .iter()
                    .any(|r| r.kind == Kind::Server && r.tagged && !r.failed)
        })
        .map(|(id, _)| id.clone())
        .collect();
    out.sort();
    out
}

/// `cp-<n>`: the control planes' logical ids (the pool name `cp` is reserved, so `cp-0-1` is a pool's).
#[must_use]
pub fn is_control_plane(logical_id: &str) -> bool {
    logical_id
        .strip_prefix("cp-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Formed when a control plane of the cluster runs or the API answers with the cluster's CA; fresh only
/// when neither shows a cluster. A running control plane that has not finished its bootstrap still counts:
/// it is the initializer of a run that was stopped, or it joins one, and a new init would race it.
#[must_use]
pub fn decide(e: &Evidence) -> Decision {
    // The initializer's create failed while the others were made to join it: they wait for a
    // cluster that no one initialised, and a joining cp-0 would never make it.
    if e.needs_consoles() && e.kubeadm_seen == Some(false) {
        return Decision {
            formation: Formation::Fresh,
            reason: format!(
                "control plane(s) {} wait to join a cluster that no control plane initialised (their \
                 consoles show no kubeadm init or join, the API does not answer): {INITIALIZER} \
                 initializes it",
                e.running_control_planes.join(", ")
            ),
        };
    }
    if !e.running_control_planes.is_empty() {
        return Decision {
            formation: Formation::Formed,
            reason: format!(
                "control plane(s) {} of the cluster run: new control planes join it",
                e.running_control_planes.join(", ")
            ),
        };
    }
    match &e.api {
        Some(ApiAnswer::Answered) => Decision {
            formation: Formation::Formed,
            reason: "the cluster's API answers at its endpoint with the cluster's CA: new control planes join it"
                .into(),
        },
        Some(ApiAnswer::Silent(why)) => Decision {
            formation: Formation::Fresh,
            reason: format!(
                "no control plane of the cluster runs and its API does not answer ({why}): cp-0 initializes it"
            ),
        },
        None => Decision {
            formation: Formation::Fresh,
            reason: "no control plane of the cluster runs: cp-0 initializes it".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use kos_cluster::observe::{Facts, Resource};

    use super::*;

    fn server(id: &str, failed: bool) -> (String, Vec<Resource>) {
        (
            id.to_owned(),
            vec![Resource {
                kind: Kind::Server,
                logical_id: id.to_owned(),
                id: format!("uuid-{id}"),
                name: format!("kos-demo-{id}"),
                tagged: true,
                state: if failed { "ERROR" } else { "ACTIVE" }.into(),
                failed,
                facts: Facts::default(),
            }],
        )
    }

    #[test]
    fn running_control_planes_skip_workers_ports_and_failed_servers() {
        let mut observed = Observed {
            cluster: "demo".into(),
            at_unix: None,
            resources: [
                server("cp-2", false),
                server("cp-1", false),
                server("cp-0", true),
                server("cp-0-1", false),
                server("workers-0", false),
            ]
            .into_iter()
            .collect(),
        };
        let mut port = server("cp-3", false);
        port.1[0].kind = Kind::Port;
        observed.resources.insert(port.0, port.1);
        assert_eq!(running_control_planes(&observed), ["cp-1", "cp-2"]);
    }

    /// The case of the issue: cp-0 deleted behind kos's back, cp-1 and cp-2 run. The re-created cp-0
    /// joins whatever the API says (it may be private, or its LB not yet answering).
    #[test]
    fn running_control_planes_form_the_cluster_whatever_the_api() {
        for api in [None, Some(ApiAnswer::Silent("timed out".into()))] {
            // Consoles that show a kubeadm step, or tell nothing any more, or were not read.
            for kubeadm_seen in [Some(true), None] {
                let d = decide(&Evidence {
                    running_control_planes: vec!["cp-1".into(), "cp-2".into()],
                    api: api.clone(),
                    kubeadm_seen,
                });
                assert_eq!(d.formation, Formation::Formed);
                assert!(d.reason.contains("cp-1, cp-2"), "{}", d.reason);
            }
        }
    }

    /// Issue 20 (1): cp-0's create failed while cp-1 and cp-2 were made to join it. Their consoles
    /// show no kubeadm step and the API is silent: cp-0 initializes, or no one ever would.
    #[test]
    fn joiners_waiting_for_an_initializer_that_never_ran_leave_the_cluster_fresh() {
        let mut e = Evidence {
            running_control_planes: vec!["cp-1".into(), "cp-2".into()],
            api: None,
            kubeadm_seen: None,
        };
        assert!(e.needs_api() && e.needs_consoles());
        e.kubeadm_seen = Some(false);
        let d = decide(&e);
        assert_eq!(d.formation, Formation::Fresh);
        assert!(d.reason.contains("cp-0 initializes it"), "{}", d.reason);
        // The initializer itself runs (still before kubeadm, say): nothing to read, formed.
        let e = Evidence {
            running_control_planes: vec!["cp-0".into(), "cp-2".into()],
            api: None,
            kubeadm_seen: None,
        };
        assert!(!e.needs_api() && !e.needs_consoles());
        assert_eq!(decide(&e).formation, Formation::Formed);
    }

    #[test]
    fn an_answering_api_forms_the_cluster_without_any_control_plane_seen() {
        let e = Evidence {
            running_control_planes: Vec::new(),
            api: Some(ApiAnswer::Answered),
            kubeadm_seen: None,
        };
        assert!(e.needs_api());
        assert_eq!(decide(&e).formation, Formation::Formed);
    }

    #[test]
    fn only_nothing_at_all_is_fresh() {
        assert_eq!(decide(&Evidence::default()).formation, Formation::Fresh);
        let d = decide(&Evidence {
            running_control_planes: Vec::new(),
            api: Some(ApiAnswer::Silent("connection refused".into())),
            kubeadm_seen: None,
        });
        assert_eq!(d.formation, Formation::Fresh);
        assert!(d.reason.contains("connection refused"));
    }

    #[test]
    fn control_plane_ids() {
        assert!(is_control_plane("cp-0") && is_control_plane("cp-12"));
        for id in ["cp-", "cp-0-1", "cp-a", "port-cp-0", "workers-0", "cp"] {
            assert!(!is_control_plane(id), "{id}");
        }
    }
}
