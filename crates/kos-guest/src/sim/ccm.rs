//! The cloud controller in a simulated cluster. When the addons put the CCM's DaemonSet into
//! `kube-system` (upstream OCCM, whose container runs `/bin/openstack-cloud-controller-manager`, or
//! kos-ccm's manifest, `/bin/kos-ccm`) and a control plane of the cluster is up, kos-ccm runs
//! in-process with what the pod would get:
//! - its arguments, `command` then `args`, with `$(VAR)` expanded from the container's `env` as the
//!   kubelet expands them (`$$` escapes), and the binary path first dropped as kos-ccm's own
//!   entrypoint drops it (so `ccm: upstream` runs kos-ccm as the drop-in it claims to be);
//! - `--cloud-config` read through the container's `volumeMounts` from the Secret volume behind
//!   it (the `cloud-config` Secret's `cloud.conf`);
//! - the cluster's API through its `kubernetes` Service (any API server of the cluster), with the
//!   token of the pod's `serviceAccountName` the kubelet would mount (none without the
//!   ServiceAccount, as the pod would not be created), so its requests are authorised by the RBAC
//!   the addons applied;
//! - the container's environment for the OpenStack session (`OS_*`, `OS_CCM_REGIONAL`).
//!
//! It stops gracefully (releasing its Lease) when no control plane of the cluster is up, and is
//! restarted with the kubelet's back-off (10 s doubling to 5 min) when it exits. Not simulated: its
//! `/healthz` and `/metrics` (on the node's address, which this machine does not have), env
//! `valueFrom`, and a cloud.conf on anything but a Secret volume (both refuse to start, with the
//! reason in [`Ccms::status`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use clap::Parser;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub(crate) use super::pod::wait_stopped;
use super::pod::{self, BACKOFF_START, Container, Ended, Exit, argv, backoff, ended};
use crate::cluster::{Cluster, ClusterId, KUBE_SYSTEM};
use crate::guest::{Guest, Power};

/// The binaries whose container is a cloud controller.
const BINARIES: &[&str] = &["/openstack-cloud-controller-manager", "/kos-ccm"];

struct Pod {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Exit>,
    /// The DaemonSet's pod template this pod was made from: another one replaces the pod.
    template: Value,
}

#[derive(Default)]
struct State {
    pod: Option<Pod>,
    restarts: u32,
    retry_at: Option<Instant>,
    status: String,
}

/// The cloud controllers, by cluster.
#[derive(Default)]
pub(crate) struct Ccms {
    by_cluster: BTreeMap<ClusterId, State>,
    stopping: Vec<JoinHandle<Exit>>,
}

/// The kos-ccm command line (the binary's own flags).
#[derive(Parser)]
#[command(name = "kos-ccm")]
struct Cli {
    #[command(flatten)]
    run: kos_ccm::options::RunArgs,
}

impl Ccms {
    /// Starts, restarts and stops the clusters' CCMs. `services`: each cluster's `kubernetes`
    /// Service address.
    pub fn reconcile(&mut self, guest: &Guest, services: &BTreeMap<ClusterId, SocketAddr>) {
        let now = Instant::now();
        self.stopping.retain(|t| !t.is_finished());
        for id in self.by_cluster.keys().copied().collect::<Vec<_>>() {
            if !guest.clusters.contains_key(&id)
                && let Some(mut st) = self.by_cluster.remove(&id)
                && let Some(pod) = st.pod.take()
            {
                self.stopping.push(stop(pod));
            }
        }
        for (id, cluster) in &guest.clusters {
            let st = self.by_cluster.entry(*id).or_default();
            if st.pod.as_ref().is_some_and(|p| p.task.is_finished())
                && let Some(pod) = st.pod.take()
            {
                st.finished(ended(pod.task), now, *id);
            }
            let control_plane_up = guest
                .servers
                .values()
                .any(|s| s.power == Power::On && s.api_of == Some(*id));
            let service = services.get(id).copied();
            let spec = find(cluster);
            let wanted = control_plane_up && spec.is_some() && service.is_some();
            if !wanted {
                if let Some(pod) = st.pod.take() {
                    self.stopping.push(stop(pod));
                    st.status = "stopped: no control plane is up".into();
                }
                continue;
            }
            let (Some(spec), Some(service)) = (spec, service) else {
                continue;
            };
            // A changed pod template (a new cloud.conf revision, `kubectl rollout restart`): the
            // DaemonSet controller replaces the pod, which reads its configuration afresh.
            if st.pod.as_ref().is_some_and(|p| p.template != spec.template)
                && let Some(pod) = st.pod.take()
            {
                self.stopping.push(stop(pod));
                st.restarts = 0;
                st.retry_at = None;
                tracing::debug!(cluster = %id, daemonset = %spec.daemonset, "pod template changed: replacing the cloud controller");
            }
            if st.pod.is_some() || st.retry_at.is_some_and(|t| t > now) {
                rollout_status(cluster, &spec, st.pod.is_some());
                continue;
            }
            match start(guest, cluster, &spec, service) {
                Ok(pod) => {
                    tracing::debug!(cluster = %id, daemonset = %spec.daemonset, "cloud controller started");
                    st.pod = Some(pod);
                    st.retry_at = None;
                    st.status = format!("running (kube-system/{})", spec.daemonset);
                    rollout_status(cluster, &spec, true);
                }
                Err(why) => {
                    if st.status != why {
                        tracing::warn!(cluster = %id, "cloud controller cannot start: {why}");
                    }
                    st.retry_at = Some(now + BACKOFF_START);
                    st.status = why;
                }
            }
        }
    }

    /// Asks every CCM to stop; the tasks to wait for.
    pub fn stop_all(&mut self) -> Vec<JoinHandle<Exit>> {
        let mut all: Vec<JoinHandle<Exit>> = std::mem::take(&mut self.stopping);
        for st in self.by_cluster.values_mut() {
            if let Some(pod) = st.pod.take() {
                all.push(stop(pod));
                st.status = "stopped".into();
            }
        }
        all
    }

    pub fn status(&self) -> BTreeMap<ClusterId, String> {
        self.by_cluster
            .iter()
            .map(|(id, st)| (*id, st.status.clone()))
            .collect()
    }
}

fn stop(mut pod: Pod) -> JoinHandle<Exit> {
    if let Some(tx) = pod.stop.take() {
        let _ = tx.send(());
    }
    pod.task
}

impl State {
    /// Records a pod that ended: restarted with the kubelet's back-off when kos-ccm exited, left
    /// alone when its runtime cancelled it.
    fn finished(&mut self, ended: Ended, now: Instant, cluster: ClusterId) {
        let exit = match ended {
            Ended::Exited(exit) => exit,
            Ended::Cancelled => {
                self.status = "stopped: the simulator is shutting down".into();
                tracing::debug!(cluster = %cluster, "cloud controller {}", self.status);
                return;
            }
        };
        let wait = backoff(self.restarts);
        self.restarts += 1;
        self.retry_at = Some(now + wait);
        self.status = match exit {
            Ok(()) => format!("exited; restarting in {}s", wait.as_secs()),
            Err(e) => format!("exited: {e}; restarting in {}s", wait.as_secs()),
        };
        tracing::warn!(cluster = %cluster, "cloud controller {}", self.status);
    }
}

/// The CCM container of a cluster's DaemonSets.
struct Spec {
    daemonset: String,
    /// `metadata.generation` of the DaemonSet.
    generation: i64,
    /// `spec.template`: what a rollout compares.
    template: Value,
    pod: Value,
    container: Value,
}

impl Spec {
    fn view(&self) -> Container<'_> {
        Container {
            namespace: KUBE_SYSTEM,
            pod: &self.pod,
            container: &self.container,
        }
    }
}

/// The CCM's DaemonSet in `cluster`, (namespace, name), if the addons made one.
pub(crate) fn daemonset(cluster: &Cluster) -> Option<(String, String)> {
    find(cluster).map(|s| (KUBE_SYSTEM.to_owned(), s.daemonset))
}

fn find(cluster: &Cluster) -> Option<Spec> {
    let sets = cluster
        .kube
        .list_json("apps/v1", "DaemonSet", Some(KUBE_SYSTEM))
        .ok()?;
    sets.into_iter().find_map(|ds| {
        let pod = ds.pointer("/spec/template/spec")?.clone();
        let container = pod
            .get("containers")?
            .as_array()?
            .iter()
            .find(|c| {
                argv(c)
                    .first()
                    .is_some_and(|a| BINARIES.iter().any(|b| a.ends_with(b)))
            })?
            .clone();
        Some(Spec {
            daemonset: ds.pointer("/metadata/name")?.as_str()?.to_owned(),
            generation: ds
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1),
            template: ds.pointer("/spec/template")?.clone(),
            pod,
            container,
        })
    })
}

fn start(
    guest: &Guest,
    cluster: &Cluster,
    spec: &Spec,
    service: SocketAddr,
) -> Result<Pod, String> {
    let view = spec.view();
    let (args, env) = pod::command_line(&spec.container, BINARIES)?;
    let cli = Cli::try_parse_from(std::iter::once("kos-ccm".to_owned()).chain(args))
        .map_err(|e| format!("kos-ccm refuses its arguments: {}", e.to_string().trim()))?;
    let mut opts = cli
        .run
        .check()
        .map_err(|e| format!("kos-ccm refuses its arguments: {e}"))?;
    opts.serve_on = None;
    let path = opts.cloud_config.display().to_string();
    let text = pod::mounted_file(cluster, &view, &path)?;
    let loaded = kos_ccm::CloudConfig::parse(&path, &text).map_err(|e| e.to_string())?;
    let (ca, _) = super::apiserver::cluster_ca(guest, cluster.id)
        .ok_or("no control plane of the cluster holds its CA")?;
    let token = pod::service_account_token(cluster, &view)?;
    let client = pod::client(service, &ca, token)?;
    let os_env = kos_cloud::Env::from_vars(env);
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        kos_ccm::run::run_with(opts, &os_env, loaded, client, async {
            let _ = rx.await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    Ok(Pod {
        stop: Some(tx),
        task,
        template: spec.template.clone(),
    })
}

/// The DaemonSet's status as its controller reports it, with the one in-process CCM standing for
/// its pods: rolled out (`updatedNumberScheduled` = `numberAvailable` = desired, `observedGeneration`
/// current) only while a CCM made from the current template runs.
fn rollout_status(cluster: &Cluster, spec: &Spec, running: bool) {
    use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
    let n = i32::from(running);
    let want = DaemonSetStatus {
        observed_generation: Some(spec.generation),
        desired_number_scheduled: 1,
        current_number_scheduled: n,
        updated_number_scheduled: Some(n),
        number_ready: n,
        number_available: Some(n),
        number_unavailable: (n == 0).then_some(1),
        number_misscheduled: 0,
        ..DaemonSetStatus::default()
    };
    let current = cluster
        .kube
        .get::<DaemonSet>(Some(KUBE_SYSTEM), &spec.daemonset)
        .ok()
        .flatten()
        .and_then(|d| d.status);
    if current.as_ref() == Some(&want) {
        return;
    }
    // The DaemonSet controller's status write, as its ServiceAccount.
    let controller = crate::cluster::controller(&cluster.kube, "daemon-set-controller");
    if let Err(e) = controller.update::<DaemonSet>(Some(KUBE_SYSTEM), &spec.daemonset, true, |d| {
        d.status = Some(want)
    }) {
        tracing::debug!(daemonset = %spec.daemonset, "cannot report the rollout: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A task its runtime cancelled is no failure: no restart is scheduled and nothing warns. A
    /// kos-ccm that returned or panicked is restarted after the back-off.
    #[tokio::test]
    async fn a_cancelled_pod_is_not_restarted_and_a_panicked_one_is() {
        let now = Instant::now();
        let cancelled = tokio::spawn(std::future::pending::<Exit>());
        cancelled.abort();
        while !cancelled.is_finished() {
            tokio::task::yield_now().await;
        }
        let end = ended(cancelled);
        assert_eq!(end, Ended::Cancelled);
        let mut st = State::default();
        st.finished(end, now, ClusterId(1));
        assert_eq!((st.restarts, st.retry_at), (0, None));
        assert!(st.status.starts_with("stopped"), "{}", st.status);

        let panicked: JoinHandle<Exit> = tokio::spawn(async { panic!("boom") });
        while !panicked.is_finished() {
            tokio::task::yield_now().await;
        }
        let end = ended(panicked);
        assert!(
            matches!(&end, Ended::Exited(Err(e)) if e.starts_with("panicked")),
            "{end:?}"
        );
        st.finished(end, now, ClusterId(1));
        assert_eq!(st.restarts, 1);
        assert_eq!(st.retry_at, Some(now + BACKOFF_START));
        assert!(st.status.contains("restarting in 10s"), "{}", st.status);
    }

    #[test]
    fn backoff_doubles_to_five_minutes() {
        assert_eq!(backoff(0), Duration::from_secs(10));
        assert_eq!(backoff(1), Duration::from_secs(20));
        assert_eq!(backoff(9), Duration::from_secs(300));
    }
}
