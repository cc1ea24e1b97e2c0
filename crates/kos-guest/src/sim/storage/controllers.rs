//! What drives a CSI driver in a real cluster, as one loop per cluster, read from upstream's code:
//! - the PV binder (kube-controller-manager's `persistentvolume` controller): hands a claim of a
//!   class with an external provisioner to it (`volume.kubernetes.io/storage-provisioner`), binds
//!   a claim and the volume made for it both ways, marks a volume whose claim is gone `Released`;
//! - the scheduler's volume binding: a pod using claims goes to a Ready node that tolerates its
//!   taints, matches its node selector and every bound volume's node affinity; a claim of a
//!   `WaitForFirstConsumer` class gets `volume.kubernetes.io/selected-node` first;
//! - external-provisioner: CreateVolume for a claim handed to the driver (name `pvc-<uid>`, the
//!   class's parameters, `--extra-create-metadata`, topology from the nodes' CSINode keys, a claim
//!   as the source), a PersistentVolume for it; DeleteVolume for a `Released` volume whose policy
//!   is `Delete`;
//! - the attach-detach controller and external-attacher: a VolumeAttachment per (volume, node) a
//!   scheduled pod needs, ControllerPublish/Unpublish behind its finalizer;
//! - the kubelet's volume manager: NodeStage once per node, NodePublish per pod, the pod Running
//!   once mounted; unpublish and unstage when the pod is gone; `volumesInUse` on the Node;
//! - external-resizer, and the kubelet's NodeExpandVolume when the driver asks for it.
//!
//! The sidecars act with the controller pod's ServiceAccount token (RBAC decides); the kubelet
//! as its node (`system:node:<name>`: the Node authorizer and NodeRestriction decide, so it reads
//! only the claims and volumes of its pods and writes only its own Node, CSINode and pods'
//! status); the scheduler as `system:kube-scheduler`, the PV binder and the attach-detach
//! controller as their ServiceAccounts (their bootstrap roles decide). What the models read is
//! read with the API server's own client.
//! Simplified: no
//! watches (each pass lists), one pass every [`PASS`]; pods are bound through `pods/binding`;
//! only pods that use claims are scheduled and started.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kos_csi::csi::controller_client::ControllerClient;
use kube::Api;
use kube::api::PostParams;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Uri};

use super::world::*;
use super::{Nodes, Spec, lock};
use crate::cluster::Cluster;
use crate::guest::Guest;

/// How often the loop runs.
pub(super) const PASS: Duration = Duration::from_millis(500);
pub(super) const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub(super) const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub(super) const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub(super) const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub(super) const PROVISIONER_FINALIZER: &str =
    "external-provisioner.volume.kubernetes.io/finalizer";
pub(super) const KUBELET_DIR: &str = "/var/lib/kubelet";

pub(super) type Error = Box<dyn std::error::Error + Send + Sync>;
pub(super) type Res<T> = Result<T, Error>;

/// What starts a cluster's loop.
pub(super) struct Setup<'a> {
    pub guest: &'a Guest,
    pub cluster: &'a Cluster,
    pub spec: &'a Spec,
    pub service: SocketAddr,
    pub socket: PathBuf,
    pub nodes: Nodes,
    /// snapshot-controller's client, when it is deployed (it may come after the driver).
    pub snapshot_controller: SnapshotController,
}

/// snapshot-controller's Deployment template and a client with its ServiceAccount's token.
pub(super) type SnapshotController =
    std::sync::Arc<std::sync::Mutex<Option<(serde_json::Value, kube::Client)>>>;

/// The provisioner sidecar's flags that change what it asks.
#[derive(Debug, Clone)]
pub(super) struct Provisioner {
    pub(super) default_fstype: String,
    pub(super) extra_create_metadata: bool,
    pub(super) topology: bool,
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().find_map(|a| {
        let rest = a.strip_prefix("--")?.trim_start_matches('-');
        let rest = rest.strip_prefix(name)?;
        if rest.is_empty() {
            Some("true")
        } else {
            rest.strip_prefix('=')
        }
    })
}

/// Starts the loop; stop it with the sender (or abort the task).
pub(super) fn start(s: Setup<'_>) -> Result<(oneshot::Sender<()>, JoinHandle<()>), String> {
    let sidecars = s.spec.sidecars();
    let has = |n: &str| sidecars.iter().any(|c| c == n);
    let provisioner = has("csi-provisioner").then(|| {
        let args = s.spec.sidecar_args("csi-provisioner");
        Provisioner {
            default_fstype: flag(&args, "default-fstype").unwrap_or("").to_owned(),
            extra_create_metadata: flag(&args, "extra-create-metadata")
                .is_some_and(|v| v == "true"),
            topology: flag(&args, "feature-gates").is_some_and(|g| g.contains("Topology=true")),
        }
    });
    let admin = s.cluster.kube.client().map_err(|e| e.to_string())?;
    let as_user =
        |u: kos_kube_fake::User| s.cluster.kube.user_client(&u).map_err(|e| e.to_string());
    let scheduler = as_user(kos_kube_fake::User::authenticated(
        "system:kube-scheduler",
        Vec::<String>::new(),
    ))?;
    let attachdetach = as_user(kos_kube_fake::User::service_account(
        crate::cluster::KUBE_SYSTEM,
        "attachdetach-controller",
    ))?;
    let binder = as_user(kos_kube_fake::User::service_account(
        crate::cluster::KUBE_SYSTEM,
        "persistent-volume-binder",
    ))?;
    let (ca, _) = crate::sim::apiserver::cluster_ca(s.guest, s.cluster.id)
        .ok_or("no control plane of the cluster holds its CA")?;
    let token = super::pod::service_account_token(s.cluster, &s.spec.view())?;
    let sidecar = super::pod::client(s.service, &ca, token)?;
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let lp = Loop {
        admin,
        scheduler,
        attachdetach,
        binder,
        sidecar,
        socket: s.socket,
        nodes: s.nodes,
        driver: kos_csi::DRIVER_NAME.to_owned(),
        provisioner,
        attacher: has("csi-attacher"),
        snapshotter: has("csi-snapshotter").then(|| {
            let args = s.spec.sidecar_args("csi-snapshotter");
            flag(&args, "extra-create-metadata").is_some_and(|v| v == "true")
        }),
        snapshot_controller: s.snapshot_controller,
        resizer: has("csi-resizer"),
        controller: None,
        staged: BTreeMap::new(),
        published: BTreeMap::new(),
        registered: BTreeMap::new(),
        retry: BTreeMap::new(),
        said: BTreeMap::new(),
        provisioning: BTreeSet::new(),
        done: done_tx,
        done_rx,
    };
    let (tx, rx) = oneshot::channel();
    Ok((tx, tokio::spawn(run(lp, rx))))
}

/// What a background worker finished, handled by the next pass.
pub(super) enum Done {
    /// A claim's CreateVolume and PersistentVolume: the volume's name, or why not.
    Provisioned {
        meta: ObjectMeta,
        class: String,
        result: Result<String, String>,
    },
}

async fn run(mut lp: Loop, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            () = tokio::time::sleep(PASS) => {}
        }
        if let Err(e) = lp.pass().await {
            tracing::debug!("storage controllers: {e}");
        }
    }
}

/// Who reports an event, with its own credentials.
pub(super) enum By<'a> {
    /// A sidecar of the CSI controller pod (its ServiceAccount).
    Sidecar,
    /// The PV binder (`kube-system/persistent-volume-binder`).
    Binder,
    /// The scheduler (`system:kube-scheduler`).
    Scheduler,
    /// A kubelet (`system:node:<name>`), with its client.
    Kubelet(&'a kube::Client),
    /// snapshot-controller (its ServiceAccount), when it is deployed.
    SnapshotController,
}

/// A volume mounted for a pod on a node.
#[derive(Debug, Clone)]
pub(super) struct Published {
    pub(super) pod_uid: String,
    pub(super) handle: String,
}

pub(super) struct Loop {
    /// The API server's own client: what the models read.
    pub(super) admin: kube::Client,
    /// The scheduler's (`system:kube-scheduler`).
    pub(super) scheduler: kube::Client,
    /// The attach-detach controller's (`kube-system/attachdetach-controller`).
    pub(super) attachdetach: kube::Client,
    /// The PV binder's (`kube-system/persistent-volume-binder`).
    pub(super) binder: kube::Client,
    pub(super) sidecar: kube::Client,
    pub(super) socket: PathBuf,
    pub(super) nodes: Nodes,
    pub(super) driver: String,
    pub(super) provisioner: Option<Provisioner>,
    pub(super) attacher: bool,
    /// The csi-snapshotter sidecar runs (with `--extra-create-metadata`?).
    pub(super) snapshotter: Option<bool>,
    pub(super) snapshot_controller: SnapshotController,
    pub(super) resizer: bool,
    pub(super) controller: Option<ControllerClient<Channel>>,
    /// (node, volume handle) → staging path.
    pub(super) staged: BTreeMap<(String, String), String>,
    /// (node, target path) → what is published there.
    pub(super) published: BTreeMap<(String, String), Published>,
    /// Node plugins registered, by node: the socket registered.
    pub(super) registered: BTreeMap<String, PathBuf>,
    /// Backoff of failing work, by key: (not before, failures).
    pub(super) retry: BTreeMap<String, (tokio::time::Instant, u32)>,
    /// The last message of each reason said about an object, to say it once.
    pub(super) said: BTreeMap<String, String>,
    /// Claims a worker is provisioning, by uid.
    pub(super) provisioning: BTreeSet<String>,
    pub(super) done: tokio::sync::mpsc::UnboundedSender<Done>,
    pub(super) done_rx: tokio::sync::mpsc::UnboundedReceiver<Done>,
}

pub(super) async fn channel(path: PathBuf) -> Res<Channel> {
    Ok(Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await?)
}

pub(super) fn status_text(s: &tonic::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", s.code(), s.message())
}

impl Loop {
    pub(super) async fn pass(&mut self) -> Res<()> {
        if self.controller.is_none() {
            if !self.socket.exists() {
                return Ok(());
            }
            self.controller = Some(ControllerClient::new(channel(self.socket.clone()).await?));
        }
        while let Ok(done) = self.done_rx.try_recv() {
            match done {
                Done::Provisioned {
                    meta,
                    class,
                    result,
                } => self.provisioned(meta, class, result).await,
            }
        }
        self.register_nodes().await;
        let w = World::read(&self.admin).await?;
        self.binder(&w).await;
        let w = World::read(&self.admin).await?;
        self.schedule(&w).await;
        if self.provisioner.is_some() {
            self.provision(&w).await;
            self.delete_released(&w).await;
        }
        let w = World::read(&self.admin).await?;
        self.attach_detach(&w).await;
        if self.attacher {
            let w = World::read(&self.admin).await?;
            self.attach(&w).await;
        }
        if let Some(extra) = self.snapshotter {
            self.snapshotter(extra).await;
        }
        let controller = lock(&self.snapshot_controller)
            .as_ref()
            .map(|(_, c)| c.clone());
        if let Some(client) = controller {
            let w = World::read(&self.admin).await?;
            self.snapshot_controller(&w, &client).await;
        }
        let w = World::read(&self.admin).await?;
        self.kubelet(&w).await;
        if self.resizer {
            self.resize(&w).await;
        }
        Ok(())
    }

    pub(super) fn due(&self, key: &str) -> bool {
        self.retry
            .get(key)
            .is_none_or(|(at, _)| *at <= tokio::time::Instant::now())
    }

    pub(super) fn failed(&mut self, key: &str) {
        let e = self
            .retry
            .entry(key.to_owned())
            .or_insert((tokio::time::Instant::now(), 0));
        let wait = Duration::from_secs(1)
            .saturating_mul(1u32 << e.1.min(8))
            .min(Duration::from_secs(300));
        e.0 = tokio::time::Instant::now() + wait;
        e.1 += 1;
    }

    pub(super) fn succeeded(&mut self, key: &str) {
        self.retry.remove(key);
    }

    /// Records an event about `obj` (once per message), as the component that reports it (its
    /// RBAC decides: the controllers' `eventsRule`, the Node authorizer's rules for a kubelet).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn event(
        &mut self,
        by: By<'_>,
        kind: &str,
        meta: &ObjectMeta,
        warning: bool,
        reason: &str,
        message: String,
        component: &str,
    ) {
        let key = format!(
            "{kind}/{reason}/{}/{}/{}",
            ns_of(meta),
            name_of(meta),
            meta.uid.clone().unwrap_or_default()
        );
        if self.said.get(&key) == Some(&message) {
            return;
        }
        self.said.insert(key, message.clone());
        let ns = meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let api_version = match kind {
            "VolumeAttachment" => "storage.k8s.io/v1",
            _ => "v1",
        };
        let now = now_time();
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", name_of(meta), rand::random::<u64>())),
                namespace: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(component.into()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            event_time: None::<MicroTime>,
            count: Some(1),
            reporting_component: Some(component.into()),
            reporting_instance: Some(component.into()),
            ..Event::default()
        };
        let client = match by {
            By::Sidecar => self.sidecar.clone(),
            By::Binder => self.binder.clone(),
            By::Scheduler => self.scheduler.clone(),
            By::Kubelet(k) => k.clone(),
            By::SnapshotController => {
                let deployed = lock(&self.snapshot_controller)
                    .as_ref()
                    .map(|(_, c)| c.clone());
                match deployed {
                    Some(c) => c,
                    // Not deployed: nothing runs that would report it.
                    None => return,
                }
            }
        };
        if let Err(e) = Api::<Event>::namespaced(client, &ns)
            .create(&PostParams::default(), &ev)
            .await
        {
            tracing::debug!("event {reason}: {e}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // The test's own set-up.
mod tests {
    use super::*;

    /// The sidecars' flags as the manifests write them (`--x`, `--x=v`, `--x=true`).
    #[test]
    fn flags_read_as_the_sidecars_parse_them() {
        let args: Vec<String> = [
            "--csi-address=$(ADDRESS)",
            "--default-fstype=ext4",
            "--feature-gates=Topology=true",
            "--extra-create-metadata",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(flag(&args, "default-fstype"), Some("ext4"));
        assert_eq!(flag(&args, "extra-create-metadata"), Some("true"));
        assert_eq!(flag(&args, "feature-gates"), Some("Topology=true"));
        assert_eq!(flag(&args, "extra"), None);
        assert_eq!(flag(&args, "timeout"), None);
    }

    /// A loop whose clients are `fake`'s: the models' (loopback), the controllers' as themselves.
    fn loop_on(fake: &kos_kube_fake::FakeKube) -> Loop {
        use kos_kube_fake::User;
        let sa = |n: &str| User::service_account("kube-system", n);
        let client = |u: User| fake.user_client(&u).expect("client");
        let (done, done_rx) = tokio::sync::mpsc::unbounded_channel();
        Loop {
            admin: fake.client().expect("client"),
            scheduler: client(User::authenticated(
                "system:kube-scheduler",
                Vec::<String>::new(),
            )),
            attachdetach: client(sa("attachdetach-controller")),
            binder: client(sa("persistent-volume-binder")),
            sidecar: client(User::service_account(
                "kube-system",
                "csi-cinder-controller-sa",
            )),
            socket: PathBuf::from("/nonexistent"),
            nodes: Nodes::default(),
            driver: "cinder.csi.openstack.org".into(),
            provisioner: None,
            attacher: false,
            snapshotter: None,
            snapshot_controller: SnapshotController::default(),
            resizer: false,
            controller: None,
            staged: BTreeMap::new(),
            published: BTreeMap::new(),
            registered: BTreeMap::new(),
            retry: BTreeMap::new(),
            said: BTreeMap::new(),
            provisioning: BTreeSet::new(),
            done,
            done_rx,
        }
    }

    fn claim(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        }
    }

    #[tokio::test]
    async fn a_controllers_event_is_written_as_its_service_account() {
        let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
        let mut lp = loop_on(&fake);
        let binder = "system:serviceaccount:kube-system:persistent-volume-binder";
        lp.event(
            By::Binder,
            "PersistentVolumeClaim",
            &claim("c1"),
            true,
            "ProvisioningFailed",
            "storageclass.storage.k8s.io \"x\" not found".into(),
            "persistentvolume-controller",
        )
        .await;
        assert_eq!(fake.events().len(), 1);
        let w = fake.writes();
        assert!(
            w.iter()
                .any(|r| r.user.as_deref() == Some(binder)
                    && r.resource.as_deref() == Some("events")),
            "{w:?}"
        );
        // Without its binding the binder's events are refused (eventsRule is its role's).
        fake.delete::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(
            None,
            "system:controller:persistent-volume-binder",
        )
        .expect("unbound");
        lp.event(
            By::Binder,
            "PersistentVolumeClaim",
            &claim("c2"),
            true,
            "ProvisioningFailed",
            "again".into(),
            "persistentvolume-controller",
        )
        .await;
        assert_eq!(fake.events().len(), 1);
        assert!(
            fake.requests()
                .iter()
                .any(|r| r.user.as_deref() == Some(binder) && r.status == 403)
        );
    }
}
