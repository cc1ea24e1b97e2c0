//! What every controller of the CCM shares at run time: the OpenStack session, the parsed
//! cloud.conf, the cluster name, the Kubernetes client and the Event recorder. Built once by the
//! binary (or a test) and handed to each controller as `Arc<Context>`; nothing is global.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kos_cloud::Session;
use kube::runtime::events::{Event, EventType, Reporter};

use crate::config::CloudConfig;
use crate::recorder::Recorder;

/// The Event recorder's API calls (see [`crate::rbac`]): [`Recorder`] creates
/// `events.k8s.io/v1` Events in the namespace of the object (`default` for Nodes) and patches
/// the series of a repeated one.
pub const API_CALLS: &[crate::rbac::ApiCall] = &[crate::rbac::ApiCall {
    by: "events: the Recorder",
    verbs: &["create", "patch"],
    group: "events.k8s.io",
    resource: "events",
    scope: crate::rbac::Scope::Cluster,
    names: &[],
}];

/// The field manager of every write the CCM makes (what `managedFields` show).
pub const FIELD_MANAGER: &str = "kos-ccm";

/// Patch parameters of every write the CCM makes: its field manager, nothing else.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// An error and its causes on one line, for logs and Event notes.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The upstream CCM's `--cluster-name` default.
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";

/// Shared by all controllers.
pub struct Context {
    pub session: Session,
    pub config: Arc<CloudConfig>,
    /// `--cluster-name`: part of load-balancer names and descriptions.
    pub cluster_name: String,
    pub client: kube::Client,
    pub recorder: Recorder,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("cluster_name", &self.cluster_name)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// `reporter` names the CCM in the Events it records (`reportingController`/`Instance`).
    pub fn new(
        session: Session,
        config: CloudConfig,
        cluster_name: impl Into<String>,
        client: kube::Client,
        reporter: Reporter,
    ) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            session,
            config: Arc::new(config),
            cluster_name: cluster_name.into(),
            client,
        }
    }

    /// The region the CCM serves: the session's, else cloud.conf's `[Global] region`.
    pub fn region(&self) -> Option<&str> {
        self.session
            .region()
            .or(self.config.global.region.as_deref())
            .filter(|r| !r.is_empty())
    }

    /// Records an Event about `regarding`. Best effort: an Event that cannot be written is logged,
    /// never a reason to fail the reconcile that wanted to tell the user something.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, regarding).await {
            tracing::warn!(
                reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                error = %e,
                "cannot record event"
            );
        }
    }
}
