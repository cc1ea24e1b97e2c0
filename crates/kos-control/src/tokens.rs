//! What new nodes of a running cluster need from it before they join: the bootstrap token's Secret
//! (the first control plane's cleanup deleted the one it was made with) and, for joining control
//! planes, `kubeadm-certs` (kubeadm's `upload-certs`, done by kos); and both taken away once every
//! node joined. Nothing here holds the token or a key in an error: the rendered objects never
//! reach one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kos_bootstrap::{ClusterSecrets, copycerts};
use kos_cluster::ClusterSpec;
use kos_cluster::graph::Kind;
use kos_cluster::plan::{Op, Plan};
use kos_lifecycle::api::chain;

use crate::connect::{ClientError, Cloud, api_client};
use crate::kube::{Kube, KubeError, gone_is_fine};
use crate::report::{Event, Report};
use crate::store::{Cause, Records, SecretStore};

const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

/// Why the join token or kubeadm-certs could not be put into the cluster, or taken out.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("cannot render {what}")]
    Render {
        what: &'static str,
        #[source]
        source: kos_bootstrap::Error,
    },
    #[error("{what} as rendered is not a JSON or YAML object")]
    Rendered { what: &'static str },
    #[error("the API returned the TTL token without a name or uid")]
    TokenWithoutName,
}

fn render(what: &'static str) -> impl FnOnce(kos_bootstrap::Error) -> PushError {
    move |source| PushError::Render { what, source }
}

/// Creates the bootstrap token's Secret in the cluster (an existing one is kept).
///
/// # Errors
/// [`PushError`].
pub async fn ensure_token(kube: &Kube, secrets: &ClusterSecrets) -> Result<(), PushError> {
    let manifest = kos_bootstrap::bootstrap_token_secret(secrets)
        .map_err(render("the join token's Secret"))?;
    let body: serde_json::Value =
        serde_saphyr::from_str(manifest.yaml.expose()).map_err(|_| PushError::Rendered {
            what: "the join token's Secret",
        })?;
    match kube.post(SECRETS, &body).await {
        Ok(_) | Err(KubeError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `kubeadm init phase upload-certs`, done by kos: a TTL token (two hours, no usages), the
/// `kubeadm-certs` Secret it owns with every shared CA and key sealed under
/// `secrets.certificate_key` (replacing an earlier one), and the Role that lets joining nodes read
/// it.
///
/// # Errors
/// [`PushError`].
/// `now`: on the cloud's clock ([`crate::connect::cloud_now`]), which the token cleaner keeps.
pub async fn ensure_certs(
    kube: &Kube,
    secrets: &ClusterSecrets,
    now: time::OffsetDateTime,
) -> Result<(), PushError> {
    let token = copycerts::ttl_token(&mut rand::rng(), now)
        .map_err(render("the kubeadm-certs TTL token"))?;
    let body: serde_json::Value =
        serde_json::from_str(token.expose()).map_err(|_| PushError::Rendered {
            what: "the kubeadm-certs TTL token",
        })?;
    let created = kube.post(SECRETS, &body).await?;
    let (Some(name), Some(uid)) = (
        created["metadata"]["name"].as_str(),
        created["metadata"]["uid"].as_str(),
    ) else {
        return Err(PushError::TokenWithoutName);
    };
    let certs = copycerts::kubeadm_certs(secrets, &secrets.certificate_key, name, uid)
        .map_err(render("kubeadm-certs"))?;
    let body: serde_json::Value =
        serde_json::from_str(certs.expose()).map_err(|_| PushError::Rendered {
            what: "kubeadm-certs",
        })?;
    // kubeadm's CreateOrUpdate: the earlier Secret is sealed under another run's key.
    gone_is_fine(kube.delete(&certs_path()).await)?;
    kube.post(SECRETS, &body).await?;
    for (path, body) in copycerts::rbac() {
        match kube.post(path, &body).await {
            Ok(_) | Err(KubeError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// [`ensure_certs`] when `kubeadm-certs` is gone from the cluster (the first control plane's
/// cleanup deletes it within its first hours).
///
/// # Errors
/// [`PushError`].
pub async fn ensure_certs_present(
    kube: &Kube,
    secrets: &ClusterSecrets,
    now: time::OffsetDateTime,
) -> Result<(), PushError> {
    if kube.get_opt(&certs_path()).await?.is_none() {
        ensure_certs(kube, secrets, now).await?;
    }
    Ok(())
}

/// Deletes `kubeadm-certs` (one already gone is fine): the certificates must not outlive the joins.
///
/// # Errors
/// The API's.
pub async fn delete_certs(kube: &Kube) -> Result<(), KubeError> {
    gone_is_fine(kube.delete(&certs_path()).await)
}

/// Deletes the join token's Secret (one already gone is fine).
///
/// # Errors
/// The API's.
pub async fn delete_token(kube: &Kube, secrets: &ClusterSecrets) -> Result<(), KubeError> {
    gone_is_fine(
        kube.delete(&format!("{SECRETS}/bootstrap-token-{}", secrets.token.id))
            .await,
    )
}

/// Keeps the join token (and with `certs` kubeadm-certs) in the cluster while new nodes join,
/// every `poll`: the first control plane's cleanup may delete them again when the nodes it expected
/// have joined. `connect` makes a client (it fails until the API answers); `pushed` is set, and
/// [`Event::TokenPushed`] reported, the first time the token is there; `now` is the cloud's clock.
/// Never returns: the caller drops it when the nodes are followed.
#[allow(clippy::too_many_arguments)]
pub async fn keep_for_joiners<C, F, E>(
    connect: C,
    now: &(dyn Fn() -> time::OffsetDateTime + Send + Sync),
    secrets: &ClusterSecrets,
    certs: bool,
    poll: Duration,
    pushed: &AtomicBool,
    report: &dyn Report,
) -> std::convert::Infallible
where
    C: Fn() -> F,
    F: Future<Output = Result<Kube, E>>,
    E: std::error::Error + 'static,
{
    loop {
        match connect().await {
            Ok(kube) => {
                match ensure_token(&kube, secrets).await {
                    Ok(()) => {
                        if !pushed.swap(true, Ordering::Relaxed) {
                            report.event(Event::TokenPushed);
                        }
                    }
                    Err(e) => tracing::debug!("join token not created yet: {}", chain(&e)),
                }
                if certs && let Err(e) = ensure_certs_present(&kube, secrets, now()).await {
                    tracing::debug!("kubeadm-certs not put back yet: {}", chain(&e));
                }
            }
            Err(e) => tracing::debug!("join token not created yet: {}", chain(&e)),
        }
        tokio::time::sleep(poll.max(Duration::from_millis(500))).await;
    }
}

/// Where the join token goes when the cluster's API cannot be reached from here: something a person
/// runs on a control plane (the CLI: a 0600 script in the cluster's directory).
pub trait TokenScript: Send + Sync {
    /// Writes what creates the token (with `certs`, and kubeadm-certs under
    /// `secrets.certificate_key`) on a control plane of `cluster`; where it is, for messages.
    /// `now`: the cloud's clock, which the control plane keeps.
    ///
    /// # Errors
    /// Why it could not be written (never with the token in it).
    fn write(
        &self,
        cluster: &str,
        secrets: &ClusterSecrets,
        certs: bool,
        now: time::OffsetDateTime,
    ) -> Result<String, Cause>;
    /// Removes one an earlier run wrote: it is of no use once the token is in the cluster, and
    /// holds a token.
    fn remove(&self);
}

/// No way around a private API: the joining nodes wait for a token someone else puts there.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoScript;

impl TokenScript for NoScript {
    fn write(
        &self,
        _: &str,
        _: &ClusterSecrets,
        _: bool,
        _: time::OffsetDateTime,
    ) -> Result<String, Cause> {
        Err("no place for a token script".into())
    }
    fn remove(&self) {}
}

/// Why the join token or kubeadm-certs could not be put into the cluster from here.
#[derive(Debug, thiserror::Error)]
pub enum PushTokenError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Push(#[from] PushError),
}

/// Nodes a run makes need the bootstrap token in the running cluster (a `renewed` one is unknown to
/// it; the first control plane's cleanup deleted the old one): its Secret, and with `certs`
/// kubeadm-certs, created through the API at the address `store` keeps. Best effort: a private API
/// is out of reach from here, and then the token goes to `script`. Reports what happened.
#[allow(clippy::too_many_arguments)]
pub async fn push<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
    secrets: &ClusterSecrets,
    renewed: bool,
    certs: bool,
    script: &dyn TokenScript,
    report: &dyn Report,
) {
    let result = async {
        let meta = store
            .meta()
            .map_err(ClientError::Store)?
            .ok_or(ClientError::NoAddress)?;
        let kube = api_client(cloud, spec, &meta.api_address, secrets).await?;
        ensure_token(&kube, secrets).await?;
        if certs {
            ensure_certs(&kube, secrets, cloud.now()).await?;
        }
        Ok::<(), PushTokenError>(())
    }
    .await
    .map_err(|e| chain(&e));
    match result {
        Ok(()) => {
            report.event(Event::TokenInCluster { certs, renewed });
            script.remove();
        }
        Err(why) => match script.write(spec.name.value.as_str(), secrets, certs, cloud.now()) {
            Ok(location) => report.event(Event::TokenScript {
                why: &why,
                location: &location,
            }),
            Err(e) => report.event(Event::TokenScriptFailed {
                why: &why,
                error: &e.to_string(),
            }),
        },
    }
}

/// The cloud ids of the control planes `plan` keeps running.
#[must_use]
pub fn running_control_planes(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter(|a| {
            a.kind == Kind::Server && kos_lifecycle::formation::is_control_plane(&a.logical_id)
        })
        .filter_map(|a| a.existing.as_ref())
        .filter(|r| !r.failed)
        .map(|r| r.id.clone())
        .collect()
}

/// Whether the plan makes a control plane (which joins when the cluster is formed).
#[must_use]
pub fn joins_control_planes(plan: &Plan) -> bool {
    plan.actions.iter().any(|a| {
        a.kind == Kind::Server
            && matches!(a.op, Op::Create | Op::Replace)
            && kos_lifecycle::formation::is_control_plane(&a.logical_id)
    })
}

fn certs_path() -> String {
    format!("{SECRETS}/{}", copycerts::KUBEADM_CERTS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kos_kube_fake::FakeKube;

    use super::*;
    use crate::kube::tests::{direct, secrets, serve};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_token_and_certs_are_put_in_kept_and_taken_out() {
        let s = secrets();
        let fake = FakeKube::start().await.unwrap();
        let front = serve(&fake, &s, &["127.0.0.1"], &s);
        let kube = direct(front.addr().port(), &s);
        let token = format!("{SECRETS}/bootstrap-token-{}", s.token.id);

        ensure_token(&kube, &s).await.unwrap();
        // One already there (the cleanup has not run yet) is kept.
        ensure_token(&kube, &s).await.unwrap();
        let t = kube.get(&token).await.unwrap();
        assert_eq!(t["type"], "bootstrap.kubernetes.io/token");

        let now = time::OffsetDateTime::now_utc();
        ensure_certs_present(&kube, &s, now).await.unwrap();
        let certs = kube.get(&certs_path()).await.unwrap();
        let first_uid = certs["metadata"]["uid"].clone();
        // Owned by its two-hour token, as kubeadm makes it.
        assert!(certs["metadata"]["ownerReferences"][0]["name"].is_string());
        // Present: left alone.
        ensure_certs_present(&kube, &s, now).await.unwrap();
        assert_eq!(
            kube.get(&certs_path()).await.unwrap()["metadata"]["uid"],
            first_uid
        );
        // Put again under a new key: replaced.
        ensure_certs(&kube, &s, now).await.unwrap();
        assert_ne!(
            kube.get(&certs_path()).await.unwrap()["metadata"]["uid"],
            first_uid
        );

        delete_certs(&kube).await.unwrap();
        delete_token(&kube, &s).await.unwrap();
        assert!(kube.get_opt(&certs_path()).await.unwrap().is_none());
        assert!(kube.get_opt(&token).await.unwrap().is_none());
        // Gone already: fine.
        delete_certs(&kube).await.unwrap();
        delete_token(&kube, &s).await.unwrap();
    }
}
